"""Parsing a base URL or a proxy URL into an ``Origin``: scheme, host, port and path prefix.

``urllib.parse.urlsplit`` does the splitting; what it lets through is refused here, before any
connection, so that a URL means one destination on every Python version: text before or after
an IP literal's brackets (which ``hostname`` drops), brackets around anything but an IPv6
address, a port that is not ASCII digits (Python 3.9 reads ``+80``, ``1_0`` or Arabic-Indic
digits with ``int()``) and port 0, which names no destination.
"""

from __future__ import annotations

import re
from urllib.parse import SplitResult, quote, unquote, urlsplit

from ._errors import InvalidBaseUrl, InvalidOption
from ._typing import not_utf8, short

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Optional

_DEFAULT_PORTS = {"http": 80, "https": 443}
# RFC 3986 section 3.3: what a path may hold as it is; the rest is percent-encoded.
PATH_SAFE = "/%:@!$&'()*+,;=-._~"
# An IP literal is the whole host (RFC 3986 section 3.2.2): "[", the address, "]", then a port or nothing.
_BRACKETED = re.compile(r"\[([^\[\]]*)\](?::(.*))?", re.DOTALL)


def _password(url: str) -> str:
    """The password in ``url``, or "": what follows the first ":" of the user info."""
    rest = url.partition("://")[2] or url
    # Up to the last "@": a password may hold an unescaped "/", "?" or "#". Masking too much
    # of a URL that is wrong anyway is the safe side.
    userinfo, at, _ = rest.rpartition("@")
    return userinfo.partition(":")[2] if at else ""


def shown_url(url: object) -> str:
    """``repr(url)`` for a message, any password in it replaced by ``***``."""
    if not isinstance(url, str):
        return short(url)
    password = _password(url)
    if password:
        cut = url.rindex("@")
        url = url[: cut - len(password)] + "***" + url[cut:]
    return repr(url)


def ascii_host(host: str) -> str:
    """``host`` as DNS and the Host header want it: IDNA-encoded, label by label.

    Raises:
        UnicodeError: A label is empty or over 63 characters, or holds a character IDNA refuses.
    """
    if ":" in host:
        return host  # an IPv6 address
    if host.isascii():
        # The codec's own check for an ASCII name, without loading it (and unicodedata).
        labels = host.split(".")
        if len(labels) > 1 and not labels[-1]:
            labels.pop()  # a final dot is allowed
        if not all(0 < len(label) < 64 for label in labels):
            raise UnicodeError("label empty or too long")
        return host
    return host.encode("idna").decode("ascii")


def _check_netloc(netloc: str, url: str) -> None:
    """Raises ``ValueError`` for the host and port urlsplit reads loosely (module docstring)."""
    hostport = netloc.rpartition("@")[2]  # urlsplit's own split of the user info
    port: Optional[str]
    if "[" in hostport or "]" in hostport:
        match = _BRACKETED.fullmatch(hostport)
        if match is None:
            raise ValueError("brackets must enclose the whole host, followed by nothing but :port")
        address, port = match.groups()
        if "%" in address:
            # RFC 6874's "%25eth0" never resolved and a bare "%eth0" went out in the Host header,
            # which RFC 9110 gives no zone id: refused rather than half supported.
            raise ValueError("an IPv6 zone id (after '%') is not supported")
        if not _is_ipv6(address):
            raise ValueError("the brackets must hold an IPv6 address")
    else:
        _, colon, port = hostport.partition(":")
        port = port if colon else None
    if port:  # "h:" is the default port (RFC 3986 section 3.2.3)
        # With an "@" in the URL, the "port" may be a password whose "/" ended the authority.
        hidden = "@" in url
        if not (port.isascii() and port.isdigit()):  # urlsplit's words
            raise ValueError("Port could not be cast to integer value" + ("" if hidden else f" as {port!r}"))
        if not 1 <= int(port) <= 65535:
            raise ValueError(("the port" if hidden else f"port {int(port)}") + " is out of range 1-65535")


def _is_ipv6(address: str) -> bool:
    import ipaddress  # only for a URL with brackets: the cold path has none

    try:
        ipaddress.IPv6Address(address)
    except ValueError:
        return False
    return True


def _split(url: str) -> tuple[Optional[SplitResult], str]:
    """``url`` split, or None and why not (any password masked)."""
    try:
        parts = urlsplit(url)
        _check_netloc(parts.netloc, url)
    except ValueError as exc:
        password = _password(url)
        return None, str(exc).replace(password, "***") if password else str(exc)
    return parts, ""


def _encoded_host(host: str) -> tuple[str, str]:
    """``host`` IDNA-encoded, or "" and why it cannot be."""
    try:
        return ascii_host(host.lower()), ""
    except UnicodeError as exc:
        return "", str(exc)


class Origin:
    """A parsed http(s) URL: scheme, host (IDNA-encoded), port, path prefix (percent-encoded)."""

    __slots__ = ("_auth", "host", "path", "port", "scheme", "source")

    def __init__(
        self, url: object, what: str = "base_url", via: Optional[str] = None, given: object = None
    ) -> None:
        """``what`` names the option in messages, ``via`` the environment variable it came from,
        ``given`` what the caller wrote when ``url`` was completed from it (messages quote it)."""
        given = url if given is None else given
        error = InvalidBaseUrl if what == "base_url" else InvalidOption
        name = what if via is None else f"{what} from {via}"
        if not isinstance(url, str):
            raise error(f"{name} must be a str holding an http(s) URL, got {shown_url(given)}")
        if any(ch.isspace() or ord(ch) < 32 for ch in url):
            raise error(f"{name} must be an http(s) URL without spaces, got {shown_url(given)}")
        if (problem := not_utf8(url)) is not None:
            # Bytes os.environ or sys.argv could not decode; neither a path nor a password could
            # be encoded. Not quoted: the URL may hold a password.
            raise error(f"{name} is {problem}")
        # The helpers catch; the errors are raised here, outside any except clause, so that
        # no __context__ carries the URL (and its password) along.
        parts, problem = _split(url)
        if parts is None:
            raise error(f"{name} is not a valid URL ({problem}): {shown_url(given)}")
        scheme = parts.scheme.lower()
        if what == "proxy" and scheme != "http":  # not "an http or https URL": https is refused too
            raise error(f"only http:// proxies are supported ({name}), got {shown_url(given)}")
        if scheme not in _DEFAULT_PORTS or not parts.hostname:
            raise error(f"{name} must be an http or https URL with a host, got {shown_url(given)}")
        if parts.query or parts.fragment:
            raise error(f"{name} must not have a query or fragment, got {shown_url(given)}")
        host, problem = _encoded_host(parts.hostname)
        if problem:
            raise error(f"{name} has a host name IDNA cannot encode ({problem}): {shown_url(given)}")
        self.scheme = scheme
        self.host = host
        self.port = parts.port if parts.port is not None else _DEFAULT_PORTS[scheme]
        self.path = quote(parts.path.rstrip("/"), safe=PATH_SAFE)
        if what == "base_url" and (parts.username is not None or parts.password is not None):
            raise error(f"{name} must not carry credentials; pass api_key instead")
        self._auth = (parts.username, parts.password)
        self.source = url  # as given, credentials included: for pickling a client

    @property
    def netloc(self) -> str:
        """host[:port] as the Host header wants it: no default port, IPv6 in brackets."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == _DEFAULT_PORTS[self.scheme] else f"{host}:{self.port}"

    def url(self) -> str:
        return f"{self.scheme}://{self.netloc}{self.path}"

    def basic_auth(self) -> Optional[str]:
        """A Basic credential from the URL's user:password, for a proxy."""
        user, password = self._auth
        if user is None:
            return None
        import base64

        raw = f"{unquote(user)}:{unquote(password or '')}".encode()
        return "Basic " + base64.b64encode(raw).decode("ascii")

    def secrets(self) -> tuple[str, ...]:
        """The forms of the URL's credentials a page or header may echo, longest first: the
        password (as written and decoded), user:password and the Basic token. Forms under 4
        characters are left out: they would be hidden wherever they appear in a message."""
        auth = self.basic_auth()
        if auth is None:
            return ()
        user, password = self._auth
        token = auth[len("Basic ") :]
        forms = {token, f"{unquote(user or '')}:{unquote(password or '')}"}
        forms |= {password, unquote(password)} if password else set()
        return tuple(sorted((f for f in forms if len(f) >= 4), key=len, reverse=True))
