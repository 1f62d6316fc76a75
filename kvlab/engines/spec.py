"""EngineSpec: how to launch one engine server, validated; the engine names kvlab knows and local-model paths."""

from __future__ import annotations

import ipaddress
import json
import os
import re
import socket
from pathlib import Path
from typing import Literal
from urllib.parse import quote, quote_plus, urlsplit, urlunsplit

from pydantic import BaseModel, ConfigDict, Field, model_validator

from kvlab import host
from kvlab.paths import ROOT

#: Every engine kvlab can launch, in the order reports list them: what EngineSpec.name accepts
#: (kvlab.engines.registry has an adapter for each, and refuses to import where the two differ).
ENGINE_NAMES: tuple[str, ...] = ("vllm", "sglang", "sglang-jax")
#: The compute dtypes an engine spec may ask for: "auto" (the model's own) and the engines' own names, plus
#: "bfloat16-if-native", which this host resolves (EngineSpec.served_dtype).
DTYPES = ("auto", "bfloat16", "float16", "float32", "bfloat16-if-native")
#: The engines' own data-parallel flags (vLLM --data-parallel-size / -dp, SGLang --dp-size / --dp): what ``dp`` sets.
DP_FLAGS = ("--dp-size", "--dp", "--data-parallel-size", "-dp")


#: Engine options that carry a secret (vLLM 0.32, SGLang 0.5.23, sglang-jax 0.1.0rc0 parsers): never in
#: extra_args, where the spec stores them and ``ps`` shows them. The API key goes through api_key_env.
SECRET_OPTIONS = (
    "--api-key",
    "--admin-api-key",
    "--hf-token",
    "--ssl-keyfile-password",
    "--disaggregation-shared-secret",
)
#: Options an engine defines that are prefixes of a secret option but carry none (argparse matches an exact
#: option before it tries abbreviations).
_NOT_SECRET_EXACT = ("--ssl-keyfile",)

#: Environment names that look like they hold a secret: KEY, TOKEN, SECRET, PASS (PASSWORD, PASSWD, PASSPHRASE), PWD
#: (MYSQL_PWD), DSN (SENTRY_DSN: a URL with its key in it), AUTH, COOKIE or CREDENTIAL anywhere in the name, in any case
#: (HF_TOKEN, VLLM_API_KEY, MYKEY, SSHKEY, ACCESSKEY, KEYFILE, DB_PASS, OAUTH_CLIENT), unless every such word in it
#: lies inside one of the harmless words of :data:`NOT_SECRET_ENV_WORDS`. PASSWORD and PASSWD are words of their own so
#: that an allow-listed word cannot hide one that overlaps it (BYPASSWORD: BYPASS holds PASS, not PASSWORD).
SECRET_ENV_WORDS = (
    "KEY",
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "PASS",
    "PWD",
    "DSN",
    "AUTH",
    "COOKIE",
    "CREDENTIAL",
)
SECRET_ENV_RE = re.compile("|".join(SECRET_ENV_WORDS), re.I)
#: The allow-list: words that contain one of those and name no secret (TOKENIZERS_PARALLELISM, which Hugging Face
#: tokenizers read; KEYBOARD; a BYPASS or PASSTHROUGH switch). A secret word is excused only where it lies wholly inside
#: one of these, so a name that also says KEY or TOKEN elsewhere (HF_TOKENIZER_TOKEN), or a secret word that runs past
#: the allowed one (BYPASSWORD), still looks like a secret. No shipped experiment sets a name that needs it (their env:
#: JAX_*, SGLANG_USE_CPU_ENGINE, PYTHONPATH; tests/test_spec.py loads each).
NOT_SECRET_ENV_WORDS = re.compile(r"KEYBOARD|TOKENIZERS?|BYPASS|PASSTHROUGH", re.I)
#: Whole names that hold no secret though they contain a secret word: the shell's working folders.
NOT_SECRET_ENV_NAMES = ("PWD", "OLDPWD")
#: The secret words as error messages list them.
_SECRET_WORDS_TEXT = ", ".join(f"*{w}*" for w in SECRET_ENV_WORDS if w not in ("PASSWORD", "PASSWD"))
#: What stands for a secret's value in what kvlab prints and stores.
REDACTED = "***"


#: Options that choose where the engine's API server listens: kvlab gives them itself (``host``, and a port it picked
#: free), and one in extra_args, last on the command line, would override them (``--host 0.0.0.0``: every interface).
BIND_OPTIONS = ("--host", "--port")


def _option_spelt(arg: str, options: tuple[str, ...], exact_exempt: tuple[str, ...] = ()) -> str | None:
    """The option of ``options`` that ``arg`` spells (``--api-key``, ``--api_key``, ``--api-k=…``: argparse accepts
    any unambiguous prefix of a long option, and vLLM's parser reads '_' as '-'), else None. ``exact_exempt``: the
    engines' own options that are prefixes of one of ``options`` (argparse matches an exact option first)."""
    if not arg.startswith("--"):
        return None
    # vLLM's parser also reads '--opt.field value' as a JSON value of --opt
    name = arg.split("=", 1)[0].split(".", 1)[0].replace("_", "-")
    if len(name) < 3 or name in exact_exempt:  # '--' alone ends the options
        return None
    return next((opt for opt in options if opt.startswith(name)), None)


def secret_option(arg: str) -> str | None:
    """The secret option ``arg`` spells, in any spelling the engine's parser accepts, else None. Checked against each
    engine's own parser by tests/test_engines.py (kvlab.engines.parsecheck.ask_parser)."""
    return _option_spelt(arg, SECRET_OPTIONS, _NOT_SECRET_EXACT)


def bind_option(arg: str) -> str | None:
    """The listening-address option (:data:`BIND_OPTIONS`) ``arg`` spells, in any spelling the parser accepts."""
    return _option_spelt(arg, BIND_OPTIONS)


#: The option whose JSON value sets up a ZeroMQ publisher of KV-cache events, in vLLM and SGLang alike (each engine's
#: KVEventsConfig): its ``endpoint`` defaults to tcp://*:5557, which binds every interface, and ``replay_endpoint``
#: opens a second socket, always bound.
KV_EVENTS_OPTION = "--kv-events-config"
KV_EVENTS_DEFAULT_ENDPOINT = "tcp://*:5557"


def kv_events_config(extra_args: list[str]) -> dict | None:
    """The KV-events publisher configuration ``extra_args`` give (``--kv-events-config JSON``, ``=JSON``, in any
    spelling the parser accepts, and vLLM's ``--kv-events-config.field value``, a JSON value where it parses as one),
    merged; None where none is given. A value that is not a JSON object raises ValueError."""
    return _json_option(extra_args, KV_EVENTS_OPTION, "where its publisher listens")


def _option_value(extra_args: list[str], i: int) -> str:
    """The value of the option at ``extra_args[i]``: after its '=', else the next word ('' where none)."""
    name, eq, value = extra_args[i].partition("=")
    return value if eq else extra_args[i + 1] if i + 1 < len(extra_args) else ""


def _json_option(extra_args: list[str], option: str, checked: str) -> dict | None:
    """The JSON object ``option`` is given in ``extra_args`` (:func:`kv_events_config`'s spellings), merged; None
    where it is not given. ``checked``: what kvlab reads it for, in the error a value that is no object raises."""
    config: dict | None = None
    for i, arg in enumerate(extra_args):
        if _option_spelt(arg, (option,)) is None:
            continue
        name, value = arg.partition("=")[0], _option_value(extra_args, i)
        config = config or {}
        if "." in name:  # vLLM's '--kv-events-config.endpoint tcp://…'
            try:
                field_value = json.loads(value)
            except ValueError:
                field_value = value
            config[name.split(".", 1)[1].replace("-", "_")] = field_value
            continue
        try:
            parsed = json.loads(value)
        except ValueError:
            parsed = None
        if not isinstance(parsed, dict):
            raise ValueError(f"extra_args: {option} takes a JSON object, which kvlab reads to check {checked}")
        config |= parsed
    return config


def _every_interface(where: str) -> bool:
    """Whether a ZeroMQ tcp address binds every interface (``*``, an empty host, 0.0.0.0, ::)."""
    if where in ("*", ""):
        return True
    try:
        return ipaddress.ip_address(where).is_unspecified
    except ValueError:
        return False


def _kv_events_binds(field: str, endpoint: str, config: dict) -> bool:
    """Whether the engine listens on ``endpoint`` rather than connecting to it: the replay socket always binds; the
    publisher binds a wildcard address (vLLM: ``*`` or ``::`` in it; SGLang also 0.0.0.0, and its ``bind`` field
    decides where given) and connects to any other."""
    if field == "replay_endpoint":
        return True
    if config.get("bind") is not None:
        return bool(config["bind"])
    return "*" in endpoint or "::" in endpoint or "0.0.0.0" in endpoint


def kv_events_endpoint_problem(config: dict, host: str) -> str | None:
    """Why a KV-events publisher configured by ``config`` (:func:`kv_events_config`) would listen beyond ``host``,
    the interface the server is given, or None: a publisher that publishes (``publisher: zmq``, or vLLM's
    ``enable_kv_cache_events`` with no publisher named) and binds a tcp address on every interface (``*``, the
    default) or on an address that is neither ``host`` nor a loopback one. An endpoint the publisher connects to
    opens no listening socket; ipc:// and inproc:// endpoints open no network socket."""
    if _every_interface(host.strip("[]")):  # the server itself is given every interface
        return None
    publisher = config.get("publisher")
    if publisher == "null" or (publisher is None and not config.get("enable_kv_cache_events")):
        return None
    for field in ("endpoint", "replay_endpoint"):
        endpoint = config.get(field, KV_EVENTS_DEFAULT_ENDPOINT if field == "endpoint" else None)
        if not isinstance(endpoint, str) or not endpoint.startswith("tcp://"):
            continue
        if not _kv_events_binds(field, endpoint, config):
            continue
        where = endpoint[len("tcp://") :].rsplit(":", 1)[0].strip("[]")
        if not _every_interface(where) and (where == host.strip("[]") or is_loopback(where)):
            continue
        given = "" if field in config else " (its default, when no endpoint is given)"
        beyond = "on every interface" if _every_interface(where) else f"on {where}, beyond {host!r}"
        return (
            f"extra_args: {KV_EVENTS_OPTION} {field} {endpoint!r}{given} would listen {beyond}: give an ipc:// "
            f"endpoint, or a tcp:// one on {host!r} or the loopback"
            + (
                ' (a publisher binds it with SGLang\'s "bind": true, and connects to it otherwise)'
                if field == "endpoint"
                else ""
            )
        )
    return None


#: vLLM's option that sets up a KV connector (KVTransferConfig), a JSON object naming it in ``kv_connector``.
KV_TRANSFER_OPTION = "--kv-transfer-config"
#: vLLM's KV connectors that open no listening socket (read from vLLM 0.32.0's sources: they keep KV in this
#: server's CPU memory or in local files, or only time a decode): every other one opens ports of its own (NIXL's
#: side channel, Mooncake's, MoRIIO's and LMCache's sockets and servers), on addresses kvlab cannot give them.
LOCAL_KV_CONNECTORS = frozenset(
    {
        "ExampleConnector",
        "ExampleHiddenStatesConnector",
        "OffloadingConnector",
        "SimpleCPUOffloadConnector",
        "DecodeBenchConnector",
    }
)
#: SGLang's options that move KV to another server or to a networked store, each opening sockets of its own (the
#: disaggregation bootstrap server and transfer engine, the storage backends' clients and servers, LMCache's): the
#: values that keep it on this server (None: a flag, on whenever given).
SGLANG_KV_TRANSFER_OPTIONS: dict[str, frozenset[str] | None] = {
    "--disaggregation-mode": frozenset({"null"}),
    "--hicache-storage-backend": frozenset({"file"}),
    "--enable-lmcache": None,
    "--enable-unified-cache-external-linker": None,
}


def kv_connector_problem(engine: str, extra_args: list[str], host: str) -> str | None:
    """Why ``extra_args`` would make a server that kvlab launches at ``host`` open ports of a KV connector beyond it,
    or None. vLLM: a ``--kv-transfer-config`` whose connector is not one of :data:`LOCAL_KV_CONNECTORS` (a
    ``MultiConnector`` is judged by each it holds; one loaded from ``kv_connector_module_path`` is unknown, so
    refused). SGLang: :data:`SGLANG_KV_TRANSFER_OPTIONS`. Nothing is refused where ``host`` is itself every
    interface."""
    if _every_interface(host.strip("[]")):
        return None
    fix = (
        "kvlab gives every port a server it launches the address host names, and cannot give these theirs: start "
        "such a server outside kvlab and give its url"
    )
    if engine == "vllm":
        config = _json_option(extra_args, KV_TRANSFER_OPTION, "which KV connector it sets up")
        if not config or not config.get("kv_connector"):
            return None
        held = [config]
        if config["kv_connector"] == "MultiConnector":
            held = list((config.get("kv_connector_extra_config") or {}).get("connectors") or [])
        for c in (c if isinstance(c, dict) else {} for c in held):
            name = c.get("kv_connector")
            if name not in LOCAL_KV_CONNECTORS or c.get("kv_connector_module_path"):
                return (
                    f"extra_args: {KV_TRANSFER_OPTION} sets up the KV connector {name!r}, which opens ports of its "
                    f"own (only {', '.join(sorted(LOCAL_KV_CONNECTORS))} open none): {fix}"
                )
        return None
    if engine != "sglang":
        return None
    for i, arg in enumerate(extra_args):
        option = _option_spelt(arg, tuple(SGLANG_KV_TRANSFER_OPTIONS))
        if option is None:
            continue
        local = SGLANG_KV_TRANSFER_OPTIONS[option]
        value = None if local is None else _option_value(extra_args, i)
        if local is None or value not in local:
            given = option if value is None else f"{option} {value}"
            keeps = "" if local is None else f" (only {', '.join(sorted(local))} keeps KV on this server)"
            return f"extra_args: {given} moves KV over the network with sockets of its own{keeps}: {fix}"
    return None


def _spans(pattern: re.Pattern, name: str) -> list[tuple[int, int]]:
    """Every match of ``pattern`` in ``name``, overlapping ones included, as (start, end)."""
    return [(i, i + len(m.group(0))) for i in range(len(name)) if (m := pattern.match(name, i))]


def is_secret_env(name: str) -> bool:
    """Whether an environment variable's name says it holds a secret: a word of :data:`SECRET_ENV_WORDS` that does
    not lie wholly inside an allow-listed word (:data:`NOT_SECRET_ENV_WORDS`)."""
    if name.upper() in NOT_SECRET_ENV_NAMES:
        return False
    allowed = _spans(NOT_SECRET_ENV_WORDS, name)
    return any(not any(a <= s and e <= b for a, b in allowed) for s, e in _spans(SECRET_ENV_RE, name))


#: ``scheme://user[:password]@host`` anywhere in a value: credentials written into a URL.
_URL_USERINFO_RE = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^/?#@\s]*@")
#: A proxy setting written without a scheme, ``user:password@host:port`` (curl and pip accept it).
_BARE_USERINFO_RE = re.compile(r"^[^/?#@\s:]+:[^/?#@\s]*@")


def has_userinfo(value: str, proxy: bool = False) -> bool:
    """Whether ``value`` carries credentials in a URL (``scheme://user:pw@host``); ``proxy``: also in a proxy
    setting without a scheme (``user:pw@host:port``)."""
    return bool(_URL_USERINFO_RE.search(value) or (proxy and _BARE_USERINFO_RE.match(value)))


def secret_env_value(name: str, value: str) -> bool:
    """Whether an environment entry's value would hold a secret: a URL with credentials (``DATABASE_URL``,
    ``HTTPS_PROXY``), or for a proxy variable (``*PROXY*``, any case) also ``user:pw@host:port``."""
    return isinstance(value, str) and has_userinfo(value, proxy="PROXY" in name.upper())


#: ``NAME=value`` as a word of a launch prefix (``env HF_TOKEN=…``, ``docker run -e HF_TOKEN=…``,
#: ``--env=HF_TOKEN=…``): an environment assignment.
_ASSIGNMENT_RE = re.compile(r"^(?:-e|--env=)?([A-Za-z_][A-Za-z0-9_]*)=")


def launch_assignment(word: str) -> str | None:
    """The variable a launch word assigns a secret to (``HF_TOKEN=…``, ``-eHF_TOKEN=…``), else None: a name that
    looks like a secret (:func:`is_secret_env`) or a value with credentials (:func:`secret_env_value`)."""
    m = _ASSIGNMENT_RE.match(word)
    if m is None:
        return None
    name, value = m.group(1), word[m.end() :]
    return name if is_secret_env(name) or secret_env_value(name, value) else None


def redact_env(env: dict[str, str]) -> dict[str, str]:
    """``env`` with the value of every secret-looking entry (:func:`is_secret_env`, :func:`secret_env_value`)
    replaced by '***'."""
    return {k: REDACTED if is_secret_env(k) or secret_env_value(k, v) else v for k, v in env.items()}


def redact_url(url: str) -> str:
    """``url`` with the credentials of a ``scheme://user:pw@host`` form replaced by '***'."""
    return _URL_USERINFO_RE.sub(lambda m: m.group(0).split("://", 1)[0] + "://" + REDACTED + "@", url)


def redact_secrets(obj):
    """A JSON-like value (a dumped spec, a manifest) with every ``env`` mapping's secret-looking values and the
    credentials of every URL redacted, at any depth: what kvlab stores and prints never holds them."""
    if isinstance(obj, dict):
        return {k: redact_env(v) if k == "env" and isinstance(v, dict) else redact_secrets(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [redact_secrets(v) for v in obj]
    if isinstance(obj, str) and "@" in obj:
        return redact_url(obj)
    return obj


def secret_forms(secret: str) -> list[str]:
    """Every form ``secret`` takes in an engine's log, longest first: as given, inside Python's ``repr()`` (SGLang
    prints its server arguments so: a backslash doubled, quotes escaped) and a repr of that repr, JSON-escaped
    (once and twice), and URL-encoded (``%5C``; ``+`` for a space)."""
    forms = {secret}
    for _ in range(2):  # an escaped form may itself be escaped (a repr of a dict holding the repr)
        for f in list(forms):
            forms |= {repr(f)[1:-1], json.dumps(f)[1:-1], json.dumps(f, ensure_ascii=False)[1:-1]}
    forms |= {quote(secret, safe=""), quote_plus(secret, safe=""), quote(secret)}
    return sorted((f for f in forms if f), key=len, reverse=True)


def redact_text(text: str, secret: str | None) -> str:
    """``text`` with every form of ``secret`` (:func:`secret_forms`) replaced by '***' (unchanged without one)."""
    if not secret:
        return text
    for form in secret_forms(secret):
        text = text.replace(form, REDACTED)
    return text


def holds_secret(text: str, secret: str | None) -> bool:
    """Whether ``text`` holds any form of ``secret`` (:func:`secret_forms`)."""
    return bool(secret) and any(form in text for form in secret_forms(secret))


def _stays_here(address: str) -> bool:
    """Whether an IP address connects to this machine: 127.0.0.0/8, ::1, or the unspecified address (0.0.0.0, ::),
    which connects here. False for anything that is no address."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return ip.is_loopback or ip.is_unspecified


def _resolved(host: str) -> list[str]:
    """Every address this machine's resolver gives ``host`` for TCP, in its order ([] where it gives none)."""
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):  # socket.gaierror: no such name; a label over 63 characters
        return []
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def loopback_address(host: str) -> str | None:
    """The address a connection to ``host`` stays on this machine at, else None: ``host`` itself where it is a
    loopback or unspecified literal (127.0.0.1, ::1, 0.0.0.0), else the first address a name resolves to where
    every address it resolves to is one, asked of this machine's resolver now. No name counts by its spelling:
    ``evil.localhost`` is this machine only where the resolver says so (RFC 6761 asks resolvers to, and not all do:
    one that passes it to DNS would be told anything)."""
    host = host.strip("[]")
    if not host:
        return None
    try:
        ipaddress.ip_address(host)
    except ValueError:
        addresses = _resolved(host)
        return addresses[0] if addresses and all(map(_stays_here, addresses)) else None
    return host if _stays_here(host) else None


def is_loopback(host: str) -> bool:
    """Whether connecting to ``host`` stays on this machine (:func:`loopback_address`)."""
    return loopback_address(host) is not None


def resolve_local(path_or_id: str) -> str:
    """A relative local path resolved against the repository root; other values unchanged."""
    if is_local_path(path_or_id) and not os.path.isabs(os.path.expanduser(path_or_id)):
        return str(ROOT / path_or_id)
    return os.path.expanduser(path_or_id) if path_or_id.startswith("~") else path_or_id


def is_local_path(model: str) -> bool:
    """Whether a model string names a local folder rather than a hub id like 'org/name'."""
    return model.startswith((".", "/", "~")) or "data/models" in model


def _url_host(url: str) -> str:
    """The host of an http(s) URL or ``http://host`` (brackets of an IPv6 literal kept off); ValueError naming
    the url field when it cannot be parsed (an unclosed IPv6 bracket)."""
    try:
        return urlsplit(url).hostname or ""
    except ValueError as exc:
        raise ValueError(f"url: {exc}") from None


class EngineSpec(BaseModel):
    """How to launch one engine server (what decides its argv and environment)."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True, allow_inf_nan=False)

    name: Literal[ENGINE_NAMES] = Field(
        description="engine: vllm | sglang | sglang-jax (SGLang's JAX runtime, the SGLang engine that serves on CPU)"
    )
    launch: list[str] | None = Field(
        None,
        min_length=1,
        description="command prefix that runs the engine's python, e.g. ['.engines/vllm/bin/python'], "
        "['conda', 'run', '--no-capture-output', '-n', 'sglang', 'python'] or a container command; "
        "a relative interpreter path resolves against the repository root; no word that assigns a secret "
        "(env HF_TOKEN=…: stored with every run and shown by `ps`). Give this or url",
    )
    url: str | None = Field(
        None,
        pattern=r"^https?://[^/\s]+/?$",
        description="base URL of a server kvlab did not start (a systemd unit, a Kubernetes pod, a shared "
        "endpoint), e.g. http://gpu-node-3:8000; kvlab checks it answers and serves the model, never starts "
        "or stops it, and records that it did not launch it; no credentials in it (user:password@: use "
        "api_key_env). The other fields state how it was started "
        "(they are recorded, and checked against the workload). Give this or launch",
    )
    model: str = Field(
        min_length=1, description="local model folder (relative to the repository root or absolute) or a hub id"
    )
    served_model_name: str | None = Field(None, description="name the server exposes (default: the model string)")
    tp: int = Field(1, ge=1, description="tensor-parallel size")
    dcp: int = Field(1, ge=1, description="decode-context-parallel size; must divide tp (1 = off)")
    dp: int = Field(
        1,
        ge=1,
        description="data-parallel size: engine replicas behind the one server, each over tp GPUs "
        "(vLLM --data-parallel-size, SGLang --dp-size; 1 = off); the server uses tp × dp GPUs",
    )
    mem_util: float = Field(
        0.9,
        gt=0,
        le=1,
        description="vLLM --gpu-memory-utilization (on the CPU build: fraction of host memory reserved) / "
        "SGLang --mem-fraction-static",
    )
    max_model_len: int = Field(ge=16, description="vLLM --max-model-len / SGLang --context-length")
    prefix_caching: bool = Field(True, description="prefix cache (vLLM) / radix cache (SGLang) enabled")
    kv_cache_bytes: int | None = Field(
        None,
        gt=0,
        description="explicit KV budget in bytes (overrides mem_util for KV): vLLM "
        "--kv-cache-memory-bytes; SGLang and sglang-jax --max-total-tokens = bytes / the local model's KV bytes per token",
    )
    dtype: Literal[DTYPES] = Field(
        "auto",
        description="compute dtype, --dtype (auto: the model's own; the KV cache follows it). bfloat16-if-native, "
        "for CPU experiments of a bfloat16 model: bfloat16 where this CPU computes it natively (AVX512-BF16 or "
        "AMX on x86, BF16 on Arm), else float32 with kv_cache_bytes doubled, so the KV cache holds the same "
        "tokens; vLLM's CPU build runs bfloat16 matrix products through a slow fallback on CPUs without it",
    )
    enforce_eager: bool = Field(False, description="vLLM --enforce-eager (no graph compilation; faster start)")
    trust_remote_code: bool = Field(False, description="--trust-remote-code (models with custom code, e.g. Kimi)")
    allow_long_context: bool = Field(
        False,
        description="allow max_model_len above the model's native context "
        "(VLLM_ALLOW_LONG_MAX_MODEL_LEN / SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN)",
    )
    host: str = Field("127.0.0.1", description="address the server binds and kvlab connects to")
    port: int | None = Field(None, ge=1, le=65535, description="server port; None picks a free one")
    api_key_env: str | None = Field(
        None,
        description="name of the environment variable holding the API key (the key is never stored). "
        "vLLM is given it as VLLM_API_KEY, SGLang in a private --config file removed once the server is up; "
        "sglang-jax takes it only as --api-key, where `ps` shows it to every user of the machine while it runs",
    )
    allow_insecure_key: bool = Field(
        False,
        description="allow sending the API key over http:// to a host that is not this machine (in "
        "clear text, to anyone on the network path); without it such a spec is refused",
    )
    extra_args: list[str] = Field(
        default_factory=list,
        description="more engine arguments, appended verbatim; no secret option "
        f"({', '.join(SECRET_OPTIONS)}, in any spelling the engine's parser accepts)",
    )
    env: dict[str, str] = Field(
        default_factory=dict,
        description="extra environment variables for the server; no secret-looking "
        "name (*KEY*, *TOKEN*, *SECRET*, *PASS*, *PWD*, *DSN*, *AUTH*, *COOKIE*, *CREDENTIAL*, less an allow-list: "
        "KEYBOARD, TOKENIZERS, BYPASS, PASSTHROUGH, which hides no other secret word) and no value with credentials "
        "(scheme://user:pw@host; a *PROXY* variable's user:pw@host too): the spec is stored with every run, so a "
        "secret comes from the environment kvlab runs in (the server inherits it) or api_key_env",
    )
    startup_timeout_s: float = Field(600.0, gt=0, description="seconds to wait for /health before giving up")
    stall_timeout_s: float = Field(
        600.0,
        gt=0,
        description="seconds a streaming request may wait for its next byte (first token included) "
        "before the engine counts as hung: the run fails with cause timeout and the server is killed. It also sets "
        "each request's deadline: stall_timeout_s x (max_tokens + 2), at most 3600 s (kvlab.client.request_bounds)",
    )
    dev_mode: bool = Field(
        False,
        description="vLLM VLLM_SERVER_DEV_MODE=1: opens its development endpoints (/reset_prefix_cache, "
        "/sleep, /collective_rpc), which vLLM does not guard with the API key. kvlab does not need them: it isolates "
        "each run from earlier runs' prefix cache with a per-run cache_salt. Leave it off",
    )
    report_cached_tokens: bool = Field(
        True,
        description="report usage.prompt_tokens_details.cached_tokens per request "
        "(vLLM --enable-prompt-tokens-details / SGLang --enable-cache-report)",
    )
    reasoning_parser: str | None = Field(
        None,
        description="server-side reasoning parser, passed as --reasoning-parser (names differ: vLLM "
        "'deepseek_r1', SGLang 'deepseek-r1'); the server then streams reasoning apart from the answer",
    )

    @model_validator(mode="after")
    def _check(self) -> EngineSpec:
        if (self.launch is None) == (self.url is None):
            raise ValueError(
                "give either launch (kvlab starts the server) or url (a server already running), "
                f"not {'both' if self.launch else 'neither'}"
            )
        self._check_extra_args()
        self._check_stored_secrets()
        self._check_key_transport()
        if self.dp > 1 and self._dp_flag_given:
            raise ValueError(f"dp ({self.dp}) and a data-parallel flag in extra_args: give it once, as dp")
        if self.dtype != "auto" and any(a.split("=")[0] == "--dtype" for a in self.extra_args):
            raise ValueError(f"dtype ({self.dtype}) and a dtype flag in extra_args: give it once, as dtype")
        if self.tp % self.dcp:
            raise ValueError(f"dcp ({self.dcp}) must divide tp ({self.tp})")
        return self

    def _check_extra_args(self) -> None:
        """ValueError for extra_args kvlab cannot pass on: a secret, an address of the server's own, a KV events
        endpoint or KV connector that is not safe on ``host``, or a second --config beside SGLang's key file."""
        secret = next((a for a in self.extra_args if secret_option(a)), None)
        if secret is not None:
            opt, given = secret_option(secret), secret.split("=", 1)[0]
            spelt = "" if given == opt else f" (given as {given!r}, which the engine's parser reads as {opt})"
            how = (
                "give the API key through api_key_env (kvlab never stores it), not --api-key"
                if opt == "--api-key"
                else "set it in the environment kvlab runs in (the server inherits it)"
            )
            raise ValueError(
                f"extra_args: {opt}{spelt} carries a secret, which the spec would store and `ps` would show: {how}"
            )
        bind = next((a for a in self.extra_args if bind_option(a)), None)
        if bind is not None:
            opt, given = bind_option(bind), bind.split("=", 1)[0]
            spelt = "" if given == opt else f" (given as {given!r}, which the engine's parser reads as {opt})"
            raise ValueError(
                f"extra_args: {opt}{spelt} would override where kvlab makes the server listen (host "
                f"{self.host!r} and a port it picks free): give the address as host, and leave the port to kvlab"
            )
        events = kv_events_config(self.extra_args)
        problem = kv_events_endpoint_problem(events, self.host) if events is not None else None
        if problem:
            raise ValueError(problem)
        if not self.external:
            problem = kv_connector_problem(self.name, self.extra_args, self.host)
            if problem:
                raise ValueError(problem)
        if (
            self.api_key_env
            and self.name == "sglang"
            and any(a.split("=", 1)[0] == "--config" for a in self.extra_args)
        ):
            raise ValueError(
                "extra_args: --config with api_key_env: kvlab gives SGLang its key in a --config file "
                "of its own, and SGLang reads one only"
            )

    def _check_stored_secrets(self) -> None:
        """ValueError for a secret in what the spec stores and the dry run prints: env's names and values, an
        assignment in the launch prefix, credentials in the url."""
        secret_env = sorted(k for k in self.env if is_secret_env(k))
        if secret_env:
            raise ValueError(
                f"env.{secret_env[0]}: a name that looks like a secret ({_SECRET_WORDS_TEXT}): the spec "
                "is stored with every run and printed by the dry run; set it in the environment kvlab "
                "runs in (the server inherits it), or give the API key through api_key_env"
            )
        secret_value = sorted(k for k, v in self.env.items() if secret_env_value(k, v))
        if secret_value:
            raise ValueError(
                f"env.{secret_value[0]}: the value carries credentials (user:password@ in a URL or proxy "
                "setting), which the spec would store and the dry run print; set it in the environment "
                "kvlab runs in (the server inherits it)"
            )
        assigned = next(((i, n) for i, w in enumerate(self.launch or []) if (n := launch_assignment(w))), None)
        if assigned is not None:
            raise ValueError(
                f"launch[{assigned[0]}]: assigns {assigned[1]}, which looks like a secret (a "
                "secret-looking name, or credentials in its value): the launch prefix is stored with "
                "every run, printed by the dry run and shown by `ps`; set it in the environment kvlab "
                "runs in (the server inherits it), or give the API key through api_key_env"
            )
        if self.url is not None and has_userinfo(self.url):
            raise ValueError(
                "url: credentials in the url (user:password@host), which the spec, the manifest and every "
                "run would store: give the server's API key through api_key_env, and the url without them"
            )

    @property
    def key_in_clear(self) -> bool:
        """Whether an API key goes to the server over plain http:// and must therefore stay on this machine: a key,
        no https:// url, no allow_insecure_key."""
        return bool(self.api_key_env) and not (self.url or "").startswith("https://") and not self.allow_insecure_key

    def _key_refusal(self, to: str) -> str:
        return (
            f"{'url' if self.url else 'host'}: the API key ({self.api_key_env}) would go in clear "
            f"text over http:// to {to}, which is not this machine: use an https:// url, or set "
            "allow_insecure_key: true to accept that"
        )

    def _check_key_transport(self) -> None:
        """ValueError where the API key would cross the network in clear text (http:// to another machine) without
        allow_insecure_key. A host name is resolved: it is this machine only where every address it has is."""
        # kvlab reaches a server it launches over http:// at host, an external one at its url
        to = _url_host(self.url) if self.url else self.host
        if self.key_in_clear and not is_loopback(to):
            raise ValueError(self._key_refusal(to))

    def connect_url(self, url: str) -> str:
        """The url to connect to for ``url`` (the server's base url): ``url`` itself, unless the API key goes in clear
        text (:attr:`key_in_clear`); then its host is resolved again and replaced by the loopback address it
        resolves to (:func:`loopback_address`), so that the address connected to is the address just checked and a
        resolver that answers otherwise later gets no say. ValueError (the load's refusal) where the host resolves
        to any address that is not this machine now."""
        if not self.key_in_clear:
            return url
        parts = urlsplit(url)
        address = loopback_address(parts.hostname or "")
        if address is None:
            raise ValueError(self._key_refusal(parts.hostname or url))
        netloc = f"[{address}]" if ":" in address else address
        return urlunsplit(parts._replace(netloc=netloc if parts.port is None else f"{netloc}:{parts.port}"))

    def served_dtype(self) -> str | None:
        """The compute dtype the server is launched with on this host (``--dtype``); None: the engine's default,
        the model's own. Only ``bfloat16-if-native`` depends on the host (kvlab.host.native_bf16)."""
        if self.dtype == "auto":
            return None
        if self.dtype == "bfloat16-if-native":
            return "bfloat16" if host.native_bf16() else "float32"
        return self.dtype

    def served_kv_cache_bytes(self) -> int | None:
        """kv_cache_bytes as the engine is given it: doubled where ``bfloat16-if-native`` computes in float32, so
        the float32 KV cache holds as many tokens as the bfloat16 one the budget was stated for."""
        if self.kv_cache_bytes is None:
            return None
        widened = self.dtype == "bfloat16-if-native" and self.served_dtype() == "float32"
        return self.kv_cache_bytes * (2 if widened else 1)

    @property
    def _dp_flag_given(self) -> bool:
        """Whether extra_args hold an engine's own data-parallel flag (DP_FLAGS, any spelling with '=')."""
        return any(a.split("=")[0] in DP_FLAGS for a in self.extra_args)

    @property
    def data_parallel(self) -> bool:
        """Whether the server runs data-parallel replicas: ``dp`` > 1, or an engine's own flag in extra_args."""
        return self.dp > 1 or self._dp_flag_given

    @property
    def gpus(self) -> int:
        """GPUs one server of this spec uses on a GPU host: tp × dp."""
        return self.tp * self.dp

    @property
    def model_arg(self) -> str:
        """The model as passed to the engine: local paths made absolute, hub ids unchanged."""
        return resolve_local(self.model)

    @property
    def served_name(self) -> str:
        """The model name requests carry: served_model_name, else the model as the server was given it
        (a launched local model: its absolute path; an external server: the string in the spec)."""
        return self.served_model_name or (self.model if self.external else self.model_arg)

    @property
    def external(self) -> bool:
        """A server kvlab did not start (``url``): it is neither launched nor stopped."""
        return self.url is not None

    def check_model_path(self) -> None:
        """Raise when the model looks like a local folder that does not exist (a server kvlab launches
        reads it here; an external server's model lives where that server runs)."""
        if not self.external and is_local_path(self.model) and not Path(self.model_arg).exists():
            raise ValueError(f"local model folder does not exist: {self.model_arg}")

    def local_config(self) -> dict | None:
        """A local model's config.json; None for hub ids and folders without one."""
        cfg = Path(self.model_arg) / "config.json"
        if not (is_local_path(self.model) and cfg.is_file()):
            return None
        return json.loads(cfg.read_text())

    def native_context(self) -> int | None:
        """max_position_embeddings of a local model, when its config.json says."""
        value = (self.local_config() or {}).get("max_position_embeddings")
        return int(value) if value else None
