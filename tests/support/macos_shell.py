"""macOS's stock shell environment, as far as a Linux machine can stand in for it: bash 3.2 (/bin/bash, and so
`/usr/bin/env bash`) and the BSD tools. Two halves:

- ``bash32_problems``: a reading of a script for what bash 3.2 or the BSD tools lack (bash 4+ syntax and builtins,
  the pre-4.4 empty-array error under ``set -u``, GNU-only flags, tools macOS does not ship). It reads every line,
  including the ones a test run does not reach.
- ``macos_tools``: a PATH directory whose tools act like macOS's where the deploy scripts could notice: ``bash`` runs
  with a startup file (BASH_ENV) that refuses the shell options and builtins bash 3.2 lacks, the coreutils refuse
  GNU-only flags, and the tools macOS does not ship are absent. What bash 4.4+ accepts and bash 3.2 rejects at
  run time (an empty ``"${a[@]}"`` under ``set -u``) only the reading catches.
"""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

# Every option `shopt` knows in bash 3.2 (its `shopt` listing); anything else is "invalid shell option name" there.
BASH32_SHOPT = frozenset(
    "cdable_vars cdspell checkhash checkwinsize cmdhist compat31 dotglob execfail expand_aliases extdebug extglob "
    "extquote failglob force_fignore gnu_errfmt histappend histreedit histverify hostcomplete huponexit "
    "interactive_comments lithist login_shell mailwarn no_empty_cmd_completion nocaseglob nocasematch nullglob "
    "progcomp promptvars restricted_shell shift_verbose sourcepath xpg_echo".split()
)
NOT_IN_BASH32 = ("mapfile", "readarray", "coproc")  # builtins and keywords of bash 4.0
NOT_ON_MACOS = ("timeout", "nproc", "tac", "sha256sum", "sha512sum", "md5sum", "stdbuf", "realpath")

# (what, pattern) read over each line without its comment.
_SYNTAX: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "an associative, nameref or global declaration (bash 4)",
        re.compile(r"\b(declare|local|typeset)\s+-[a-zA-Z]*[Ang]"),
    ),
    ("case modification ${x,,} / ${x^^} (bash 4)", re.compile(r"\$\{[#!]?[A-Za-z_][A-Za-z_0-9]*(\[[^]]*\])?(,|\^)")),
    ("a transformation ${x@Q} (bash 4.4)", re.compile(r"\$\{[A-Za-z_][A-Za-z_0-9]*(\[[^]]*\])?@[QEPAaUuLK]\}")),
    ("a negative subscript (bash 4.3)", re.compile(r"\$\{[A-Za-z_][A-Za-z_0-9]*\[-[0-9]")),
    ("&>> or |& (bash 4)", re.compile(r"&>>|\|&")),
    ("[[ -v (bash 4.2)", re.compile(r"\[\[\s+!?\s*-v\b")),
    ("wait -n (bash 4.3)", re.compile(r"\bwait\s+-n\b")),
    ("a brace range with a step (bash 4)", re.compile(r"\{-?[0-9]+\.\.-?[0-9]+\.\.-?[0-9]+\}")),
    ("$EPOCHSECONDS / $EPOCHREALTIME / $BASHPID (bash 4+)", re.compile(r"\$\{?(EPOCHSECONDS|EPOCHREALTIME|BASHPID)\b")),
    # bash 3.2 cannot parse a literal regex holding ( | or spaces after =~: keep it in a variable.
    ("a literal regex after =~ (bash 3.2 parses it differently: use [[ $x =~ $re ]])", re.compile(r"=~\s*[^\s$]")),
    # "${a[@]}" of an empty array is "unbound variable" under set -u before bash 4.4; ${a[@]+"${a[@]}"} is not.
    (
        "an array expanded with [@] or [*] unguarded (empty: unbound under set -u before bash 4.4)",
        re.compile(r"(?<![+\"])\"?\$\{[A-Za-z_][A-Za-z_0-9]*\[[@*]\]\}"),
    ),
)
# (tool, what, a pattern over the arguments after the tool's name): flags the BSD tools lack.
_GNU_FLAGS: tuple[tuple[str, str, re.Pattern[str]], ...] = (
    ("sed", "sed -i without a suffix (BSD sed takes the next word as one)", re.compile(r"(^|\s)-i(\s+(?!'')|$)")),
    ("readlink", "readlink -f (macOS before 12.3 lacks it)", re.compile(r"(^|\s)-[a-z]*f")),
    ("date", "date -d (GNU; BSD date -d sets the DST flag)", re.compile(r"(^|\s)-d\b")),
    ("grep", "grep -P (BSD grep has no PCRE)", re.compile(r"(^|\s)-[a-zA-Z]*P")),
    ("stat", "stat -c (GNU; BSD stat -f)", re.compile(r"(^|\s)-c\b")),
    ("sort", "sort -V (not in older macOS sort)", re.compile(r"(^|\s)-[a-zA-Z]*V")),
    ("xargs", "xargs -r (GNU)", re.compile(r"(^|\s)-[a-zA-Z]*r")),
    ("find", "find -printf / -regextype (GNU)", re.compile(r"-printf\b|-regextype\b")),
    ("cp", "cp -t (GNU)", re.compile(r"(^|\s)-t\b")),
    ("head", "head -n -N (GNU)", re.compile(r"-n\s*-[0-9]")),
)
_GNU_LONG_OPTION_TOOLS = (
    "sed",
    "readlink",
    "date",
    "grep",
    "stat",
    "sort",
    "xargs",
    "find",
    "cp",
    "head",
    "mktemp",
    "ls",
    "rm",
    "mkdir",
    "basename",
    "dirname",
    "cat",
    "tr",
    "cut",
    "wc",
    "tail",
    "uniq",
)


def _code(line: str) -> str:
    """The line without its comment (a # at the start of a word, outside quotes)."""
    out, quote = [], ""
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1] in " \t;"):
            break
        out.append(ch)
    return "".join(out)


def _commands(code: str) -> list[str]:
    """The simple commands of a line, roughly: split at ; | && || $( ` ( and a leading `if`/`then`/... keyword."""
    parts = re.split(r"\|\||&&|[;|`]|\$\(|\(|\bthen\b|\bdo\b|\belse\b|^\s*if\b|\bwhile\b|\buntil\b|!", code)
    return [p.strip() for p in parts if p.strip()]


def bash32_problems(text: str) -> list[str]:
    """'line N: what' for each construct of ``text`` that bash 3.2 or macOS's BSD tools would fail on."""
    problems = []
    for number, line in enumerate(text.splitlines(), 1):
        code = _code(line)
        for what, pattern in _SYNTAX:
            if pattern.search(code):
                problems.append(f"line {number}: {what}: {line.strip()}")
        for option in re.findall(r"\bshopt\s+-[su]+\s+([a-z_0-9 ]+)", code):
            for name in option.split():
                if name not in BASH32_SHOPT:
                    problems.append(f"line {number}: shopt {name} is not in bash 3.2: {line.strip()}")
        for command in _commands(code):
            words = command.split()
            while words and re.fullmatch(r"[A-Za-z_][A-Za-z_0-9]*=\S*", words[0]):  # VAR=value cmd
                words = words[1:]
            if not words:
                continue
            tool, args = words[0], " ".join(words[1:])
            if tool in NOT_IN_BASH32:
                problems.append(f"line {number}: {tool} is not in bash 3.2: {line.strip()}")
            if tool in NOT_ON_MACOS:
                problems.append(f"line {number}: {tool} is not on macOS: {line.strip()}")
            for name, what, pattern in _GNU_FLAGS:
                if tool == name and pattern.search(args):
                    problems.append(f"line {number}: {what}: {line.strip()}")
            if tool in _GNU_LONG_OPTION_TOOLS and re.search(r"(^|\s)--[a-z]", args):
                problems.append(f"line {number}: {tool} with a GNU long option: {line.strip()}")
    return problems


# The startup file of the stand-in bash: what bash 3.2 lacks fails as it would there.
_BASH_ENV = """\
shopt() {
  local word
  for word in "$@"; do
    case $word in
    -*) ;;
    %(options)s) ;;
    *)
      echo "${0##*/}: shopt: $word: invalid shell option name (bash 3.2, macOS's /bin/bash)" >&2
      return 1
      ;;
    esac
  done
  builtin shopt "$@"
}
%(missing)s
"""

_SHIM = """\
#!/bin/sh
# %(tool)s as macOS's BSD %(tool)s: no GNU long options%(extra_doc)s.
for arg in "$@"; do
  case $arg in
  --) break ;;
  --*) echo "%(tool)s: illegal option -- ${arg#--} (BSD %(tool)s, as on macOS)" >&2; exit 64 ;;%(extra)s
  esac
done
exec %(real)s "$@"
"""
# Per tool: a case pattern refused besides long options (the first argument only: enough for flags in front).
_SHIM_REFUSES = {
    "readlink": ("-f|-*f*", " nor -f"),
    "date": ("-d", " nor -d DATE"),
    "grep": ("-P|-*P*", " nor -P"),
    "stat": ("-c", " nor -c FORMAT"),
    "sort": ("-V|-*V*", " nor -V"),
    "xargs": ("-r", " nor -r"),
    "find": ("-printf|-regextype", " nor -printf"),
    "cp": ("-t", " nor -t"),
}


def macos_tools(bin_dir: Path, tools: tuple[str, ...]) -> None:
    """Put ``tools`` into ``bin_dir`` as macOS has them: ``bash`` behaves as bash 3.2 where a shell option or a
    builtin is missing, the coreutils refuse GNU-only flags. A tool macOS lacks (NOT_ON_MACOS) is left out."""
    bash_env = bin_dir / "bash32.env"
    missing = "\n".join(
        f'{name}() {{ echo "${{0##*/}}: {name}: command not found (bash 3.2, macOS\'s /bin/bash)" >&2; return 127; }}'
        for name in ("mapfile", "readarray")
    )
    bash_env.write_text(_BASH_ENV % {"options": " | ".join(sorted(BASH32_SHOPT)), "missing": missing})
    for tool in tools:
        if tool in NOT_ON_MACOS:
            continue
        real = shutil.which(tool)
        assert real, f"{tool} is needed by the test"
        path = bin_dir / tool
        if tool == "bash":
            body = f'#!/bin/sh\nBASH_ENV={shlex.quote(str(bash_env))} exec {shlex.quote(real)} "$@"\n'
        else:
            pattern, doc = _SHIM_REFUSES.get(tool, ("", ""))
            extra = (
                f'\n  {pattern}) echo "{tool}: illegal option -- ${{arg#-}} (BSD {tool}, as on macOS)" >&2; exit 64 ;;'
                if pattern
                else ""
            )
            body = _SHIM % {"tool": tool, "extra_doc": doc, "extra": extra, "real": shlex.quote(real)}
        path.write_text(body)
        path.chmod(0o755)
