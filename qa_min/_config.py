"""Resolving a client's configuration: explicit argument, then environment, then default.

Everything here runs once per ``Client``: where to connect, and the requests (``Endpoints``)
every call copies with its body: request line and fields, validated and encoded once.
"""

from __future__ import annotations

import os
import re
import sys

from ._constants import DEFAULT_MODEL, PUBLIC_BASE_URL, __version__
from ._errors import InvalidOption, MissingApiKey
from ._http import Outgoing
from ._origin import Origin
from ._questions import check_model
from ._redact import redact
from ._typing import plain, read, short

TYPE_CHECKING = False
if TYPE_CHECKING:
    import logging
    from collections.abc import Mapping, Sequence
    from typing import Optional

    from ._http import Fields

USER_AGENT = f"qa_min/{__version__}"
# Set by qa_min per request: extra_headers cannot (Content-Type: the body is JSON).
_FRAMING_HEADERS = {"host", "content-length", "transfer-encoding", "connection", "content-type"}
# RFC 9110 section 5.6.2: a field name is a token.
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
# A field value: no control character (C0, DEL, C1) but HTAB.
_CONTROL = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f]")
_PLAIN_SEQUENCES = (tuple, list)


def from_env(name: str, env: Mapping[str, str]) -> Optional[str]:
    """An environment value, or None when unset, empty or only whitespace."""
    value = env.get(name)
    if value is None or not value.strip():
        return None
    return value.strip()


def resolve(
    api_key: Optional[str],
    base_url: Optional[str],
    model: Optional[str],
    proxy: Optional[str],
    trust_env: bool,
) -> tuple[Optional[str], Origin, Optional[Origin], str]:
    """(api key, service origin, proxy origin, default model) from arguments, then environment."""
    if not isinstance(trust_env, bool):
        # Read as a truth value, trust_env="false" or "no" would read the environment.
        raise InvalidOption(f"trust_env must be True or False, got {short(trust_env)}")
    env: Mapping[str, str] = os.environ if trust_env else {}
    key = resolve_api_key(api_key, env)
    origin = resolve_base_url(base_url, env)
    if key is None and is_public(origin):
        raise MissingApiKey(
            "no API key: pass api_key= or set SERVICE_API_KEY (required for the public service)"
        )
    # A str subclass is read as its text: its own __eq__, encode()... are never called.
    proxy_url, via = (plain(proxy), None) if proxy is not None else env_proxy(origin, env)
    # proxy="" is no proxy, whatever the environment says: as in requests, httpx and curl.
    # (A str compared only: an object's own __eq__ may raise, and parse_proxy names its type.)
    empty = isinstance(proxy_url, str) and proxy_url == ""
    proxy_origin = None if proxy_url is None or empty else parse_proxy(proxy_url, via)
    return key, origin, proxy_origin, resolve_model(model, env)


def resolve_api_key(api_key: Optional[str], env: Mapping[str, str]) -> Optional[str]:
    if api_key is None:
        found = from_env("SERVICE_API_KEY", env)
        return None if found is None else _check_key(found, "SERVICE_API_KEY")
    api_key = plain(api_key)  # a str subclass's own strip() or encode() is never called
    if not isinstance(api_key, str) or not api_key.strip():
        raise InvalidOption("api_key must be a non-empty string (or None to read SERVICE_API_KEY)")
    return _check_key(api_key, "api_key")


def _check_key(key: str, what: str) -> str:
    """``key`` if the Authorization header can carry it: latin-1 with no control character but HTAB.

    Checked here rather than as a header so that the message names where the key came from; it
    gives the one character's code point and index, never the key."""
    if key.isascii() and key.isprintable():
        return key
    # The first control character (as ``_check_header`` finds them) or the first past latin-1.
    # Not one pattern for both: a class spanning every code point past latin-1 took
    # milliseconds to compile, on every cold start.
    control = _CONTROL.search(key)
    index = len(key) if control is None else control.start()
    try:
        key.encode("latin-1")
    except UnicodeEncodeError as exc:
        index = min(index, exc.start)
    if index == len(key):
        return key
    char = key[index]
    if char <= "\x9f":
        kind, why = "a control character", "a header value may hold none but HTAB"
    elif "\ud800" <= char <= "\udfff":  # what os.environ and surrogateescape make of undecodable bytes
        kind, why = "a surrogate", "what bytes that do not decode become; a header carries latin-1 text only"
    else:
        kind, why = "a character outside latin-1", "a header carries latin-1 text only"
    raise InvalidOption(f"{what} holds {kind} (U+{ord(char):04X}) at index {index}: {why}")


def resolve_base_url(base_url: Optional[str], env: Mapping[str, str]) -> Origin:
    if base_url is not None:
        return Origin(plain(base_url))  # a str subclass's own encode() or lstrip() is never called
    url = from_env("SERVICE_BASE_URL", env)
    # A bad value is reported under the variable's name: the caller passed no base_url.
    return Origin(PUBLIC_BASE_URL) if url is None else Origin(url, via="SERVICE_BASE_URL")


def is_public(origin: Origin) -> bool:
    public = Origin(PUBLIC_BASE_URL)
    # "api.example.com." is the same host as "api.example.com": a fully qualified name.
    mine = (origin.scheme, origin.host.rstrip("."), origin.port, origin.path)
    return mine == (public.scheme, public.host, public.port, public.path)


def resolve_model(model: Optional[str], env: Mapping[str, str]) -> str:
    if model is None:
        # Named as the variable: the caller passed no model. os.environ holds bytes that do not
        # decode as surrogates, which check_model refuses.
        found = from_env("SERVICE_DEFAULT_MODEL", env)
        return DEFAULT_MODEL if found is None else check_model(found, "SERVICE_DEFAULT_MODEL")
    return check_model(model)


def _check_header(name: object, value: object) -> tuple[str, str]:
    # Messages never quote the value: it may be the key, or another secret.
    name, value = plain(name), plain(value)  # sent as str's own bytes, whatever a subclass says
    if not isinstance(name, str) or not isinstance(value, str):
        kinds = f"({type(name).__name__}, {type(value).__name__})"
        raise InvalidOption(f"extra_headers: each item is a (name, value) pair of strings, got {kinds}")
    if not _TOKEN.fullmatch(name):
        raise InvalidOption(f"header name {short(name)} is not an RFC 9110 token")
    if _CONTROL.search(value):
        raise InvalidOption(f"the value of header {name!r} has a control character (only HTAB is allowed)")
    if value and max(value) > "\xff":  # no UnicodeEncodeError, whose repr would quote the value
        raise InvalidOption(f"the value of header {name!r} is not latin-1")
    return name, value


def _shape(value: object) -> str:
    # Never the value: "Authorization: Bearer sk-..." given as one string is a secret.
    size = f" of {len(value)} items" if isinstance(value, (tuple, list)) else ""
    return f"{type(value).__name__}{size}"


def header_fields(api_key: Optional[str], extra: Sequence[tuple[str, str]]) -> Fields:
    """The fields every request carries, ``Host`` and per-request ones excepted."""
    lines = [("Accept", "application/json"), ("User-Agent", USER_AGENT)]
    if api_key is not None:
        lines.append(_check_header("Authorization", f"Bearer {api_key}"))
    if isinstance(extra, (str, bytes)) or not hasattr(extra, "__iter__"):
        raise InvalidOption(f"extra_headers must be a sequence of (name, value) pairs, got {_shape(extra)}")
    # Anything but a plain tuple or list is the caller's own object: reading it runs its code.
    # Built only if called (the error path): the key, never shown, in what the object raised.
    hide = None if api_key is None else lambda text: redact(text, api_key)
    pairs = (
        extra
        if type(extra) in _PLAIN_SEQUENCES
        else read(list, extra, "extra_headers", "iterating it", InvalidOption, hide)
    )
    extras: list[tuple[str, str]] = []
    for item in pairs:
        if not isinstance(item, (tuple, list)):
            raise InvalidOption(f"extra_headers items are (name, value) pairs, got {_shape(item)}")
        plain_item = type(item) in _PLAIN_SEQUENCES
        pair = (
            item
            if plain_item
            else read(tuple, item, "extra_headers", "iterating an item", InvalidOption, hide)
        )
        if len(pair) != 2:
            raise InvalidOption(f"extra_headers items are (name, value) pairs, got {_shape(pair)}")
        name, value = _check_header(*pair)
        if name.lower() in _FRAMING_HEADERS:
            raise InvalidOption(f"extra_headers must not set {name!r}: qa_min sets it")
        extras.append((name, value))
    # A standard field the caller names is replaced, as httpx and requests merge headers: two
    # Authorization fields would leave servers and proxies to pick one each.
    named = {name.lower() for name, _ in extras}
    return tuple([field for field in lines if field[0].lower() not in named] + extras)


class Endpoints:
    """The requests of one client, built once: each call takes a copy with its body.

    Attributes:
        core: ``POST /v1/core``, its body to come.
        models: ``GET /v1/models``, whole.
    """

    __slots__ = ("core", "models")

    def __init__(self, core: Outgoing, models: Outgoing) -> None:
        self.core = core
        self.models = models


def endpoints(origin: Origin, proxy: Optional[Origin], common: Fields) -> Endpoints:
    """The client's requests, for ``origin`` reached directly or through ``proxy``."""
    # Through a plain-http proxy the request line carries the absolute URL.
    plain_proxy = proxy is not None and origin.scheme == "http"
    base = origin.url() if plain_proxy else origin.path
    if plain_proxy:
        assert proxy is not None
        auth = proxy.basic_auth()
        if auth is not None:
            common = (*common, ("Proxy-Authorization", auth))
    host = ("Host", origin.netloc)
    core = Outgoing(
        "POST", f"{base}/v1/core", (host, ("Content-Type", "application/json"), *common), "/v1/core"
    )
    models = Outgoing("GET", f"{base}/v1/models", (host, *common), "/v1/models")
    return Endpoints(core, models)


def env_proxy(origin: Origin, env: Mapping[str, str]) -> tuple[Optional[str], Optional[str]]:
    """The proxy the environment names for ``origin``, by the standard library's rules, and the
    variable that names it (for messages); (None, None) for none."""
    if not any(key.lower().endswith("_proxy") for key in env):
        return None, None  # keeps the heavy urllib.request import off the common path
    import urllib.request

    # A blank value is ignored, as every variable's is: urllib would take it as the proxy's URL.
    proxies = {
        name: value for name, value in urllib.request.getproxies_environment().items() if value.strip()
    }
    scheme = origin.scheme if proxies.get(origin.scheme) else "all"
    proxy = proxies.get(scheme)
    if not proxy:
        return None, None
    # Not in typeshed, but public and documented in urllib.request since Python 3.2.
    bypass = getattr(urllib.request, "proxy_bypass_environment")  # noqa: B009
    # urllib asks with the URL's host[:port], so that an entry "host:port" matches too; and with
    # the bare host, so that an IPv6 entry written without brackets ("::1") does as well. The
    # netloc drops a default port, so an entry naming it ("api.example.com:443") is asked too.
    explicit = f"[{origin.host}]:{origin.port}" if ":" in origin.host else f"{origin.host}:{origin.port}"
    if any(bypass(host, proxies) for host in (origin.netloc, origin.host, explicit)):
        return None, None
    return proxy, f"{scheme.upper()}_PROXY"


def parse_proxy(url: str, via: Optional[str] = None) -> Origin:
    """The proxy's origin; ``via`` names the environment variable ``url`` came from, if any."""
    full = "http://" + url if isinstance(url, str) and "://" not in url else url
    return Origin(full, "proxy", via, given=url)  # which refuses any scheme but http


# -- the logger -------------------------------------------------------------------------
# Set up on first use, so that ``import qa_min`` does not load logging. Silent by default (a
# NullHandler); SERVICE_LOG=debug|info adds a stderr handler. Records never hold the key or a body.

NAME = __name__.rpartition(".")[0]  # "qa_min", or the vendored package's own name
_LOGGER: Optional[logging.Logger] = None
_SWITCHED = False  # SERVICE_LOG's stderr handler is on the logger


def get_logger() -> Optional[logging.Logger]:
    """The library's logger, or None while nobody could be listening.

    Until the application imports ``logging`` (or sets ``SERVICE_LOG``) no handler can exist,
    so there is nothing to log to and no reason to pay for the import.
    """
    global _LOGGER
    if _LOGGER is None:
        if "logging" not in sys.modules:
            return None
        import logging

        logger = logging.getLogger(NAME)
        logger.addHandler(logging.NullHandler())
        _LOGGER = logger
    return _LOGGER


def read_service_log() -> None:
    """Read ``SERVICE_LOG`` as a client is made: ``debug`` or ``info`` (any case) puts a stderr
    handler on the logger, once a process, at that level; any other value is ignored."""
    global _SWITCHED
    level = (os.environ.get("SERVICE_LOG") or "").strip().lower()
    if level not in ("debug", "info"):
        return
    import logging

    logger = get_logger()
    assert logger is not None  # logging is imported now
    if not _SWITCHED:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
        logger.addHandler(handler)
        _SWITCHED = True
    logger.setLevel(logging.DEBUG if level == "debug" else logging.INFO)
