"""What a scoped git rule (``Bash(git push:*)``) lets through: git, and nothing git can run.

git runs programs it is told to run: ``git push --receive-pack='touch x'`` (or ``--exec=``, or
an abbreviation git accepts, ``--ex=``) runs that command, ``git -c core.sshCommand=... push``
and ``git clone -c``/``--config``/``--template`` arm the repository, an ``ext::`` remote is a
command line, and ``--mirror`` rewrites every ref of the far side. So a git command that only a
scoped rule permits is checked here before the hooks allow it:

- before the subcommand only ``-C DIR`` (where the repository is) and ``--no-pager`` are taken;
  ``-c``, ``--exec-path``, ``--git-dir`` and the rest are refused. A rule's words are matched
  against the command without its ``-C`` options (``Bash(git push:*)`` permits ``git -C /repo
  push origin main``);
- ``git push`` takes the options of :data:`PUSH_FLAGS` alone, spelled out (no abbreviation, so
  no spelling of ``--receive-pack``, ``--exec``, ``--mirror``, ``--all``, ``--repo``,
  ``--signed``), and pushes only to a remote it names that the session's grant lists (names or
  URLs; the default ``origin``): a bare ``git push`` would follow the repository's config,
  which the agent may have written;
- every other subcommand refuses the long options that make git run a program or write config
  (:data:`PROGRAM_OPTIONS`), in any abbreviation git accepts, the short forms of the same
  (``clone -u``/``-c``, ``rebase -x``, ``grep -O``, ``difftool -x``), a program-running action
  (``submodule foreach``, ``bisect run``, ``filter-branch``), and a ``<transport>::`` address.

A plain ``Bash`` rule permits any command, git's included: these checks give a scoped rule its
meaning, they do not confine a shell the operator handed over.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

DEFAULT_REMOTES = ("origin",)
PUSH_FLAGS = frozenset(
    {
        "--force",
        "--force-with-lease",
        "--force-if-includes",
        "--dry-run",
        "--porcelain",
        "--atomic",
        "--delete",
        "--quiet",
        "--verbose",
        "--progress",
        "--no-progress",
        "--set-upstream",
        "--tags",
        "--follow-tags",
        "--no-verify",
    }
)
PUSH_SHORT = frozenset("fnduqv")  # --force --dry-run --delete --set-upstream --quiet --verbose
PUSH_VALUED = ("--force-with-lease=", "--push-option=")
PROGRAM_OPTIONS = (
    "--receive-pack",
    "--upload-pack",
    "--exec",
    "--extcmd",
    "--ext-diff",
    "--config",
    "--template",
    "--open-files-in-pager",
    "--upload-archive",
    "--gpg-sign",
    "--signed",
    "--show-signature",
    "--filters",
)
PROGRAM_SHORT = {"clone": "uc", "rebase": "x", "grep": "O", "difftool": "x", "archive": ""}
PROGRAM_ACTIONS = {"submodule": "foreach", "bisect": "run"}
PROGRAM_COMMANDS = frozenset({"filter-branch", "difftool", "mergetool", "daemon", "instaweb"})
MIN_ABBREVIATION = 3  # "--e" and longer: git takes any unambiguous prefix of a long option


@dataclass(frozen=True)
class GitCommand:
    """A git command line: where (``-C``), the subcommand, and its arguments."""

    directories: tuple[str, ...]
    subcommand: str
    args: tuple[str, ...]

    @property
    def words(self) -> list[str]:
        """The command as a rule's words are matched against: without its ``-C`` options."""
        return ["git", self.subcommand, *self.args]


class GitRefused(Exception):
    """A git command a scoped rule does not permit; the message says why."""


def is_git(words: Sequence[str]) -> bool:
    return bool(words) and words[0].rsplit("/", 1)[-1] == "git"


def parse(words: Sequence[str]) -> GitCommand:
    """``git [-C DIR]... [--no-pager] SUBCOMMAND ARGS``; GitRefused for any other option."""
    directories: list[str] = []
    rest = list(words[1:])
    while rest and rest[0].startswith("-"):
        option = rest.pop(0)
        if option == "-C" and rest:
            directories.append(rest.pop(0))
        elif option != "--no-pager":
            raise GitRefused(
                f"git {option} before the subcommand is refused under a scoped rule (it can set "
                "config or run programs); only -C DIR is taken there"
            )
    if not rest:
        raise GitRefused("a git command needs a subcommand")
    return GitCommand(tuple(directories), rest[0], tuple(rest[1:]))


def check(command: GitCommand, remotes: Sequence[str]) -> None:
    """GitRefused (saying why) unless ``command`` runs git and nothing git can run."""
    if command.subcommand == "push":
        _check_push(command.args, remotes)
        return
    if command.subcommand in PROGRAM_COMMANDS:
        raise GitRefused(f"git {command.subcommand} runs configured programs: refused")
    action = PROGRAM_ACTIONS.get(command.subcommand)
    if action is not None and action in command.args:
        raise GitRefused(f"git {command.subcommand} {action} runs a command: refused")
    for arg in _options(command.args):
        _refuse_program_option(command.subcommand, arg)
    for arg in command.args:
        if "::" in arg.split("/", 1)[0]:
            raise GitRefused(f"{arg!r}: a <transport>:: address runs a helper program: refused")


def _options(args: Sequence[str]) -> list[str]:
    """The options among ``args`` (up to ``--``)."""
    found = []
    for arg in args:
        if arg == "--":
            break
        if arg.startswith("-") and arg != "-":
            found.append(arg)
    return found


def _refuse_program_option(subcommand: str, arg: str) -> None:
    if arg.startswith("--"):
        name = arg.partition("=")[0]
        for option in PROGRAM_OPTIONS:
            if len(name) >= MIN_ABBREVIATION and option.startswith(name):
                raise GitRefused(
                    f"{name} ({option}) makes git run a program or write config: refused "
                    "under a scoped rule"
                )
        return
    dangerous = set(PROGRAM_SHORT.get(subcommand, "")) & set(arg[1:2])
    if dangerous:
        raise GitRefused(f"git {subcommand} {arg[:2]} runs a program or sets config: refused")


def _check_push(args: Sequence[str], remotes: Sequence[str]) -> None:
    positional: list[str] = []
    ended = False
    for arg in args:
        if ended or not arg.startswith("-") or arg == "-":
            positional.append(arg)
        elif arg == "--":
            ended = True
        elif not _push_option(arg):
            raise GitRefused(
                f"git push {arg.partition('=')[0]} is refused under a scoped rule (it can run "
                "a program, or rewrite refs it does not name); spell the options out: "
                + ", ".join(sorted(PUSH_FLAGS))
            )
    if not positional:
        raise GitRefused(
            f"name the remote: git push {' | '.join(remotes)} REFSPEC (a bare git push follows "
            "the repository's config)"
        )
    if positional[0] not in remotes:
        raise GitRefused(
            f"git push to {positional[0]!r} is refused: this session pushes to "
            f"{', '.join(remotes) or 'no remote'} only"
        )


def _push_option(arg: str) -> bool:
    if arg in PUSH_FLAGS or arg.startswith(PUSH_VALUED):
        return True
    return not arg.startswith("--") and len(arg) > 1 and set(arg[1:]) <= PUSH_SHORT
