"""The fake's Git Data API (blobs, trees, commits, refs) and its commit signatures.

Objects are written into the repository's bare git directory with git's own plumbing,
so what the API makes is what a clone fetches. A commit made through
`POST git/commits` with an installation's token and no author, committer or signature
is GitHub's to sign: its author is the App's bot and it is recorded as verified (the
list is the bare repository's `fake-verified-commits` file, which its hooks read too).
`require_signed_commits` is a repository rule: a ref write (git push or API) that
brings any commit not verified is refused with GitHub's words (GH013).
"""

from __future__ import annotations

import base64
import binascii
import os
import subprocess
import sys
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

if TYPE_CHECKING:  # server.py imports the fake's route modules
    from tests.support.fake_github.server import FakeGitHub, Repo

VERIFIED_FILE = "fake-verified-commits"
RULE_FILE = "fake-require-signed-commits"
_ZERO = "0" * 40
_MODES = {"100644": "blob", "100755": "blob", "120000": "blob", "160000": "commit"}
# The pre-receive hook a repository gets with the rule on: the signature rule first (as
# GitHub's rulesets answer before anything else), then the repository's own hook.
SIGNED_HOOK = f"""
import os, subprocess, sys
lines = sys.stdin.read()
verified = set(open("{VERIFIED_FILE}").read().split()) if os.path.exists(
    "{VERIFIED_FILE}") else set()
for line in lines.splitlines():
    old, new, ref = line.split()
    if set(new) == {{"0"}}:
        continue
    found = [c for c in subprocess.run(["git", "rev-list", new, "--not", "--all"],
             capture_output=True, text=True).stdout.split() if c not in verified]
    if found:
        print(f"error: GH013: Repository rule violations found for {{ref}}.\\n"
              f"Review all repository rules at the repository's rules page.\\n\\n"
              f"- Commits must have verified signatures.\\n"
              f"  Found {{len(found)}} violation(s):\\n\\n  " + "\\n  ".join(found),
              file=sys.stderr)
        sys.exit(1)
own = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pre-receive-own")
if os.path.exists(own):
    sys.exit(subprocess.run([own], input=lines, text=True).returncode)
"""


class GitDataError(Exception):
    def __init__(self, status: int, message: str) -> None:
        self.status, self.message = status, message


def git(repo: Repo, *args: str, stdin: bytes | None = None,
        env: dict[str, str] | None = None) -> bytes:
    done = subprocess.run(["git", *args], cwd=repo.bare_path, input=stdin,
                          capture_output=True, check=False,
                          env={**os.environ, **(env or {})})
    if done.returncode != 0:
        raise GitDataError(422, done.stderr.decode(errors="replace").strip()[:300])
    return done.stdout


def object_type(repo: Repo, sha: str) -> str | None:
    done = subprocess.run(["git", "cat-file", "-t", sha], cwd=repo.bare_path,
                          capture_output=True, text=True, check=False)
    return done.stdout.strip() if done.returncode == 0 else None


def verified_commits(repo: Repo) -> set[str]:
    path = repo.bare_path / VERIFIED_FILE
    return set(path.read_text().split()) if path.exists() else set()


def mark_verified(repo: Repo, sha: str) -> None:
    with open(repo.bare_path / VERIFIED_FILE, "a") as listing:
        listing.write(sha + "\n")


def require_signed_commits(repo: Repo) -> None:
    """Turn the rule on: the repository's commits so far stay (GitHub judges what a push
    brings), every new one must be verified."""
    hooks = repo.bare_path / "hooks"
    own, hook = hooks / "pre-receive-own", hooks / "pre-receive"
    if hook.exists() and not (repo.bare_path / RULE_FILE).exists():
        hook.rename(own)
    hook.write_text(f"#!{sys.executable}\n{SIGNED_HOOK}")
    hook.chmod(0o755)
    (repo.bare_path / RULE_FILE).write_text("on\n")


def rule_violations(repo: Repo, sha: str) -> list[str]:
    """The commits a ref write to `sha` brings that the rule refuses ([] when it is off)."""
    if not (repo.bare_path / RULE_FILE).exists():
        return []
    brought = git(repo, "rev-list", sha, "--not", "--all").decode().split()
    verified = verified_commits(repo)
    return [commit for commit in brought if commit not in verified]


def _register_objects(app: FastAPI, fake: FakeGitHub, repo_of: Any, json_body: Any) -> None:
    api = fake.api_url

    @app.post("/repos/{owner}/{name}/git/blobs")
    async def create_blob(owner: str, name: str, request: Request) -> JSONResponse:
        repo = repo_of(owner, name, request)
        data = await json_body(request)
        content, encoding = data.get("content"), data.get("encoding", "utf-8")
        if not isinstance(content, str) or encoding not in ("utf-8", "base64"):
            raise GitDataError(422, "Invalid request.\n\n\"content\" wasn't supplied.")
        try:
            raw = base64.b64decode(content, validate=True) if encoding == "base64" \
                else content.encode()
        except binascii.Error:
            raise GitDataError(422, "Invalid request: content is not base64") from None
        sha = git(repo, "hash-object", "-w", "--stdin", stdin=raw).decode().strip()
        return JSONResponse({"url": f"{api}/repos/{owner}/{name}/git/blobs/{sha}",
                             "sha": sha}, status_code=201)

    @app.post("/repos/{owner}/{name}/git/trees")
    async def create_tree(owner: str, name: str, request: Request) -> JSONResponse:
        repo = repo_of(owner, name, request)
        data = await json_body(request)
        sha = _write_tree(repo, data.get("base_tree"), data.get("tree"))
        return JSONResponse(tree_json(api, repo, sha), status_code=201)

    @app.post("/repos/{owner}/{name}/git/commits")
    async def create_commit(owner: str, name: str, request: Request) -> JSONResponse:
        repo = repo_of(owner, name, request)
        data = await json_body(request)
        sha = _write_commit(fake, repo, data)
        return JSONResponse(commit_json(api, repo, sha), status_code=201)

    @app.get("/repos/{owner}/{name}/git/commits/{sha}")
    async def get_commit(owner: str, name: str, sha: str, request: Request) -> JSONResponse:
        repo = repo_of(owner, name, request)
        if object_type(repo, sha) != "commit":
            raise GitDataError(404, "Not Found")
        return JSONResponse(commit_json(api, repo, sha))


def _write_tree(repo: Repo, base_tree: Any, entries: Any) -> str:
    """base_tree (or nothing) with `entries` laid over it, written by update-index."""
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise GitDataError(422, "Invalid request.\n\nFor 'tree', is not an array.")
    index = repo.bare_path / f"fake-tree-{os.getpid()}-{id(entries)}.index"
    env = {"GIT_INDEX_FILE": str(index)}
    try:
        if base_tree is not None:
            if object_type(repo, str(base_tree)) != "tree":
                raise GitDataError(422, "base_tree is not a valid tree oid")
            git(repo, "read-tree", str(base_tree), env=env)
        else:
            git(repo, "read-tree", "--empty", env=env)
        lines = [_index_line(repo, entry) for entry in entries]
        git(repo, "update-index", "--replace", "-z", "--index-info",
            stdin=b"".join(os.fsencode(line) + b"\0" for line in lines), env=env)
        return git(repo, "write-tree", env=env).decode().strip()
    finally:
        index.unlink(missing_ok=True)


def _index_line(repo: Repo, entry: dict[str, Any]) -> str:
    path, mode, kind = entry.get("path"), entry.get("mode"), entry.get("type")
    if not isinstance(path, str) or not path or path.startswith("/") or mode not in _MODES \
            or kind != _MODES[str(mode)]:
        raise GitDataError(422, f"tree.path/mode/type invalid for {path!r}")
    if "content" in entry:
        text = entry["content"]
        if not isinstance(text, str):
            raise GitDataError(422, "tree.content is not a string")
        sha = git(repo, "hash-object", "-w", "--stdin", stdin=text.encode()).decode().strip()
    elif "sha" in entry:
        sha = entry["sha"]
    else:
        raise GitDataError(422, "Must supply either tree.sha or tree.content")
    if sha is None:
        return f"0 {_ZERO}\t{path}"  # GitHub: a null sha deletes the path
    if object_type(repo, str(sha)) != kind and kind != "commit":
        raise GitDataError(422, f"tree.sha {sha} is not a valid {kind}")
    return f"{mode} {sha}\t{path}"


def _write_commit(fake: FakeGitHub, repo: Repo, data: dict[str, Any]) -> str:
    message, tree, parents = data.get("message"), data.get("tree"), data.get("parents", [])
    if not isinstance(message, str) or not isinstance(tree, str) or \
            not isinstance(parents, list):
        raise GitDataError(422, "Invalid request: message, tree and parents are needed")
    if object_type(repo, tree) != "tree" or any(object_type(repo, str(p)) != "commit"
                                                for p in parents):
        raise GitDataError(422, "Tree SHA or parent SHA does not exist")
    custom = any(key in data for key in ("author", "committer", "signature"))
    bot = fake.bot_login
    name, email = bot, f"{fake.user_id(bot, bot=True)}+{bot}@users.noreply.github.com"
    given = data.get("author")
    who: dict[str, Any] = given if isinstance(given, dict) else {}
    name, email = str(who.get("name", name)), str(who.get("email", email))
    stamp = f"{int(datetime.now(UTC).timestamp())} +0000"
    env = {"GIT_AUTHOR_NAME": name, "GIT_AUTHOR_EMAIL": email, "GIT_AUTHOR_DATE": stamp,
           "GIT_COMMITTER_NAME": "GitHub" if not custom else name,
           "GIT_COMMITTER_EMAIL": "noreply@github.com" if not custom else email,
           "GIT_COMMITTER_DATE": stamp, "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(fake.root)}
    flags = [arg for parent in parents for arg in ("-p", str(parent))]
    sha = git(repo, "commit-tree", tree, *flags, "-F", "-", stdin=message.encode(),
              env=env).decode().strip()
    # Signed by GitHub: an installation's request that named no one (see the module doc).
    if not custom:
        mark_verified(repo, sha)
    return sha


def _register_refs(app: FastAPI, fake: FakeGitHub, repo_of: Any, json_body: Any) -> None:
    api = fake.api_url

    @app.get("/repos/{owner}/{name}/git/ref/{ref:path}")
    async def get_ref(owner: str, name: str, ref: str, request: Request) -> JSONResponse:
        repo = repo_of(owner, name, request)
        sha = _ref_sha(repo, f"refs/{ref}")
        if sha is None:
            raise GitDataError(404, "Not Found")
        return JSONResponse(ref_json(api, repo, f"refs/{ref}", sha))

    @app.post("/repos/{owner}/{name}/git/refs")
    async def create_ref(owner: str, name: str, request: Request) -> JSONResponse:
        repo = repo_of(owner, name, request)
        data = await json_body(request)
        ref, sha = data.get("ref"), data.get("sha")
        if not isinstance(ref, str) or not ref.startswith("refs/") or ref.count("/") < 2 \
                or not isinstance(sha, str):
            raise GitDataError(422, "Reference name is not valid")
        if object_type(repo, sha) != "commit":
            raise GitDataError(422, "Object does not exist")
        _check_rules(repo, ref, sha)
        done = subprocess.run(["git", "update-ref", ref, sha, _ZERO], cwd=repo.bare_path,
                              capture_output=True, check=False)
        if done.returncode != 0:
            raise GitDataError(422, "Reference already exists")
        return JSONResponse(ref_json(api, repo, ref, sha), status_code=201)

    @app.patch("/repos/{owner}/{name}/git/refs/{ref:path}")
    async def update_ref(owner: str, name: str, ref: str, request: Request) -> JSONResponse:
        repo = repo_of(owner, name, request)
        data = await json_body(request)
        sha, force = data.get("sha"), data.get("force", False)
        if not isinstance(sha, str) or not isinstance(force, bool):
            raise GitDataError(422, "Invalid request: sha (string) and force (boolean)")
        full = f"refs/{ref}"
        with fake.lock:  # one compare-and-swap at a time, as GitHub's ref updates
            old = _ref_sha(repo, full)
            if old is None:
                raise GitDataError(422, "Reference does not exist")
            if object_type(repo, sha) != "commit":
                raise GitDataError(422, "Object does not exist")
            if not force and old != sha and subprocess.run(
                    ["git", "merge-base", "--is-ancestor", old, sha], cwd=repo.bare_path,
                    check=False).returncode != 0:
                raise GitDataError(422, "Update is not a fast forward")
            _check_rules(repo, full, sha)
            git(repo, "update-ref", full, sha, old)
        return JSONResponse(ref_json(api, repo, full, sha))


def _check_rules(repo: Repo, ref: str, sha: str) -> None:
    unsigned = rule_violations(repo, sha)
    if unsigned:
        raise GitDataError(422, f"Repository rule violations found\n\nCommits must have "
                           f"verified signatures.\n\n{', '.join(unsigned)} on {ref}")


def _ref_sha(repo: Repo, ref: str) -> str | None:
    done = subprocess.run(["git", "rev-parse", "--verify", "-q", ref], cwd=repo.bare_path,
                          capture_output=True, text=True, check=False)
    return done.stdout.strip() or None


def ref_json(api: str, repo: Repo, ref: str, sha: str) -> dict[str, Any]:
    base = f"{api}/repos/{repo.owner}/{repo.name}/git"
    return {"ref": ref, "node_id": base64.b64encode(f"Ref:{ref}".encode()).decode(),
            "url": f"{base}/refs/{ref.removeprefix('refs/')}",
            "object": {"type": "commit", "sha": sha, "url": f"{base}/commits/{sha}"}}


def tree_json(api: str, repo: Repo, sha: str) -> dict[str, Any]:
    base = f"{api}/repos/{repo.owner}/{repo.name}/git"
    listing = git(repo, "ls-tree", "-l", "-z", sha).decode(errors="surrogateescape")
    entries = []
    for line in filter(None, listing.split("\0")):
        meta, _, path = line.partition("\t")
        mode, kind, entry_sha, size = meta.split()
        entry: dict[str, Any] = {"path": path, "mode": mode, "type": kind, "sha": entry_sha,
                                 "url": f"{base}/{kind}s/{entry_sha}"}
        if size.isdigit():
            entry["size"] = int(size)
        entries.append(entry)
    return {"sha": sha, "url": f"{base}/trees/{sha}", "tree": entries, "truncated": False}


def commit_json(api: str, repo: Repo, sha: str) -> dict[str, Any]:
    """A git-commit: its people, tree, parents, and the signature's verification."""
    base = f"{api}/repos/{repo.owner}/{repo.name}"
    fields = git(repo, "show", "-s", "--format=%an%x00%ae%x00%aI%x00%cn%x00%ce%x00%cI%x00"
                 "%T%x00%P%x00%B", sha).decode(errors="replace").split("\0", 8)
    an, ae, ad, cn, ce, cd, tree, parents, message = fields
    return {
        "sha": sha, "node_id": base64.b64encode(f"Commit:{sha}".encode()).decode(),
        "url": f"{base}/git/commits/{sha}", "html_url": f"{api}/{repo.owner}/{repo.name}"
        f"/commit/{sha}", "author": {"name": an, "email": ae, "date": _utc(ad)},
        "committer": {"name": cn, "email": ce, "date": _utc(cd)},
        "tree": {"sha": tree, "url": f"{base}/git/trees/{tree}"},
        "message": message.rstrip("\n"),
        "parents": [{"sha": p, "url": f"{base}/git/commits/{p}",
                     "html_url": f"{api}/{repo.owner}/{repo.name}/commit/{p}"}
                    for p in parents.split()],
        "verification": verification_json(repo, sha, tree, cd),
    }


def verification_json(repo: Repo, sha: str, tree: str, when: str) -> dict[str, Any]:
    """A commit's `verification`: GitHub's signature on the commits it made for the App
    (GET git/commits/{sha}, GET commits/{ref})."""
    verified = sha in verified_commits(repo)
    return {"verified": verified, "reason": "valid" if verified else "unsigned",
            "signature": "-----BEGIN PGP SIGNATURE-----\n(fake)\n-----END PGP SIGNATURE-----"
            if verified else None, "payload": f"tree {tree}\n" if verified else None,
            "verified_at": _utc(when) if verified else None}


def _utc(stamp: str) -> str:
    return datetime.fromisoformat(stamp).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def add_git_data_routes(app: FastAPI, fake: FakeGitHub, repo_of: Any, json_body: Any) -> None:
    """Registered by build_app with its repository lookup (a 404 for a repository the
    token cannot see) and its JSON body reader."""

    @app.exception_handler(GitDataError)
    async def git_data_error(_: Request, exc: GitDataError) -> JSONResponse:
        return JSONResponse({"message": exc.message,
                             "documentation_url": "https://docs.github.com/rest/git",
                             "status": str(exc.status)}, status_code=exc.status)

    _register_objects(app, fake, repo_of, json_body)
    _register_refs(app, fake, repo_of, json_body)
