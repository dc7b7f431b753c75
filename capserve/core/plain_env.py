"""What a spec hands to vLLM (``serving.extra_env`` and ``serving.extra_args``): plain settings, never a credential.

A spec is a file people commit and share, and its values reach the LeaderWorkerSet, the manifests written
under ``out/``, the campaign record and the flow run's stored parameters. So a name that says it holds a
credential, or a value shaped like one, is refused: such a value belongs in a Kubernetes Secret that the pod
reads by reference, the way the rollout hands vLLM the endpoint's API key (``capserve/core/rollout/secret.py``:
``valueFrom.secretKeyRef``, never the value in the pod spec). No message here repeats a value.

One rule for both: a variable ``HF_TOKEN`` and an argument ``--hf_token=…`` are the same credential. Flag names
are read as vLLM's ``FlexibleArgumentParser`` reads them (vllm/utils/argparse_utils.py: ``_`` and ``-`` alike in a
flag's name, ``--flag=value`` as ``--flag value``, an unambiguous abbreviation as its flag: ``--api-k`` is
``--api-key``, ``capserve.core.vllm.long_flag``), and case-folded on top, so ``--API-KEY=…`` is refused here
rather than echoed back in vLLM's "unrecognized arguments" line. A flag named like a credential is refused only
with a value: ``--hf-token`` alone tells vLLM to use the token cached on the host, and ``--allow-credentials`` is
a CORS switch.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from capserve.core.vllm.parser import is_option, long_flag

NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")  # what a POSIX shell and the kubelet's $(VAR) accept

# Words of a name (split at "_", "-" or ".") that say it holds a credential, wherever they stand:
# AWS_SECRET_ACCESS_KEY, DB_PASSWORD, --client-secret, GOOGLE_APPLICATION_CREDENTIALS.
_SECRET_WORDS = frozenset({"SECRET", "PASSWORD", "PASSWD", "APIKEY", "PRIVATE", "CREDENTIAL", "CREDENTIALS"})
# Words that say so only as the name's last word: HF_TOKEN, WANDB_API_KEY, --hf-token, --api-key, --ssl-keyfile;
# not vLLM's --long-prefill-token-threshold or --return-tokens-as-token-ids.
_SECRET_LAST_WORDS = frozenset({"TOKEN", "KEY", "KEYFILE", "PASS", "AUTH"})

# Shapes of credentials, by issuer's documented prefix, plus any long opaque run of key-like characters.
_SECRET_VALUES = (
    ("a Hugging Face token", re.compile(r"\bhf_[A-Za-z0-9]{20,}")),
    ("an AWS access key id", re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b")),
    ("an API key ('sk-...')", re.compile(r"\bsk-[A-Za-z0-9_-]{20,}")),
    ("a GitHub token", re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}")),
    ("a Slack token", re.compile(r"\bxox[abp]-[A-Za-z0-9-]{10,}")),
    ("a JSON web token", re.compile(r"\beyJ[A-Za-z0-9_-]{20,}\.")),
    ("a private key", re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----")),
    ("a bearer credential", re.compile(r"(?i)\bbearer\s+\S{8,}")),
    # 32+ key-like characters with a digit, a letter and an unbroken run of 20 letters and digits: base64 and hex
    # keys are; dashed names such as vLLM's --mm-encoder-fp8-scale-save-path are not.
    ("a long opaque token", re.compile(r"^(?=.*[0-9])(?=.*[A-Za-z])(?=.*[A-Za-z0-9]{20})[A-Za-z0-9+=_-]{32,}$")),
)
# A git commit or a sha256 digest is long and opaque but names content, it grants nothing.
_DIGEST = re.compile(r"^(?:[0-9a-f]{40}|[0-9a-f]{64})$")

SECRET_HINT = (
    "serving.extra_env takes plain settings only: put a credential in a Kubernetes Secret and let the pod read "  # noqa: S105 - a hint about secrets, not one
    "it by reference, as the rollout does for the endpoint's API key (capserve/core/rollout/secret.py)"
)
ARGS_HINT = (
    "the endpoint's key is the campaign's own (a random key in a Kubernetes Secret the rollout makes) and the "
    "Hub token comes from the hub credentials block; remove it"
)


def credential_words(name: str) -> list[str]:
    """The words of a variable or flag name that say it holds a credential (empty: none)."""
    words = [word for word in re.split(r"[-_.]+", name.upper().strip("-_.")) if word]
    found = {word for word in words if word in _SECRET_WORDS}
    if words and words[-1] in _SECRET_LAST_WORDS:
        found.add(words[-1])
    return sorted(found)


def credential_shape(value: str) -> str | None:
    """What credential ``value`` looks like (None: nothing)."""
    if _DIGEST.match(value):
        return None
    return next((what for what, shape in _SECRET_VALUES if shape.search(value)), None)


def env_problems(env: Mapping[str, str]) -> list[str]:
    """What is wrong with ``env`` (empty: nothing), one sentence per variable, never quoting a value."""
    problems = []
    for name, value in env.items():
        if not NAME.match(name):
            problems.append(f"{name!r} is not an environment variable name (letters, digits, '_'; not a digit first)")
            continue
        words = credential_words(name)
        if words:
            problems.append(f"{name} is named like a credential ({', '.join(words)})")
            continue
        what = credential_shape(value)
        if what:
            problems.append(f"the value of {name} looks like {what}")
    return problems


def flag_name(token: str) -> str:
    """A flag's name as vLLM reads it, case-folded: ``--API_KEY=x`` → ``api-key``, ``--hf-tok`` → ``hf-token``
    (dotted keys kept)."""
    resolved = long_flag(token.lower())
    name = (resolved or token).lstrip("-").partition("=")[0]
    head, dot, rest = name.partition(".")
    return head.replace("_", "-").lower() + dot + rest


def shown_flag(token: str) -> str:
    """A flag as written, without its ``=value``, with control characters escaped: safe for one line."""
    written = token.partition("=")[0]
    return ascii(written)[1:-1] if not written.isprintable() else written


def argument_problems(args: Sequence[str], field: str) -> list[str]:
    """Arguments that would put a credential on the pod's command line (visible to anyone who can read the pod,
    and kept in every manifest and stored parameter); named by position and flag, never by value."""
    problems = []
    skip = -1
    for index, token in enumerate(args):
        if index == skip:
            continue  # the value of a flag refused just above
        if is_option(token) and credential_shape(token.partition("=")[0]) is None:
            following = args[index + 1] if index + 1 < len(args) else None
            separate = "=" not in token and following is not None and not is_option(following)
            name = flag_name(token)
            words = credential_words(name)
            if words and ("=" in token or separate):
                read_as = "" if _plain(token) == name else f" (vLLM reads it as --{name})"
                problems.append(
                    f"{field}.{index}: {shown_flag(token)}{read_as} is named like a credential ({', '.join(words)}) "
                    f"and must not be in the pod's arguments: {ARGS_HINT} (the value is not shown here)"
                )
                skip = index + 1 if separate else -1
                continue
        what = credential_shape(token) or credential_shape(token.partition("=")[2])
        if what:
            problems.append(
                f"{field}.{index}: this argument looks like {what} and must not be in the pod's arguments; remove it "
                "(the value is not shown here)"
            )
    return problems


def _plain(token: str) -> str:
    return token.lstrip("-").partition("=")[0].replace("_", "-").lower()


