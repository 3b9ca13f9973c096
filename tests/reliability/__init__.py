"""The reliability suite: fault injection, hostile input and load against the real stack.

Run it, and render `docs/RELIABILITY.md` from its results, with `python3 -m tests.reliability`.
"""
