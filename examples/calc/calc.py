"""A tiny calculator with one bug, for trying frognano (see the README's five-minute try)."""


def add(a: int, b: int) -> int:
    return a - b


def sub(a: int, b: int) -> int:
    return a - b


def mul(a: int, b: int) -> int:
    return a * b
