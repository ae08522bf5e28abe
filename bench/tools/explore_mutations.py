"""Mutation evidence for the protocol explorers (issue 35): for each invariant, a small,
plausible break of the protocol's own code, and whether the explore tests catch it.

Each mutation is a one-place text patch of a file under ``surehand/``. The script applies it to
a scratch copy of the package and the tests (the worktree is never changed), runs the explore
test that guards the invariant there (SQLite and fakeredis, the fastest backends; the code
under test is the same on the others), and checks that the copy really imported the mutant.
It runs each mutant twice: with the
default suite's fixed budget (what CI runs) and with an exploration budget. Results: a table on
stdout, ``bench/results/explore-mutations-<UTC>.md`` (the diff, the test that caught it, the
shrunk counterexample hypothesis printed) and the same as JSON.

    .venv/bin/python bench/explore_mutations.py [--examples 200] [--only NAME]

Needs the dev virtualenv.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "bench" / "results"
PROTOCOL = "tests/chaos/test_explore_protocol.py"
SUBMISSIONS = "tests/chaos/test_explore_submissions.py"
MACHINE_TESTS = {
    PROTOCOL: "interleaving and sqlite and fakeredis",
    SUBMISSIONS: "interleaving and sqlite",
}
# The plain tests beside each machine: counterexamples kept as regression tests.
REPLAY_TESTS = {
    PROTOCOL: "not interleaving and sqlite and fakeredis",
    SUBMISSIONS: "not interleaving and sqlite",
}


@dataclass(frozen=True)
class Mutation:
    name: str
    invariant: str
    path: str
    old: str
    new: str
    test: str  # the explore test module that guards the invariant


MUTATIONS = (
    Mutation(
        "heartbeat-keeps-lease-while-unreachable",
        "at most one live owner: a heartbeat gives its lease up once a TTL passed unrenewed",
        "surehand/queue/heartbeat.py",
        "        if self._now() - self._last_ok < self.ttl_s:\n",
        "        if True:  # MUTANT: keep retrying however long Redis is away\n",
        PROTOCOL,
    ),
    Mutation(
        "heartbeat-retakes-lease-after-ttl",
        "at most one live owner: a heartbeat gives its lease up once a TTL passed unrenewed",
        "surehand/queue/heartbeat.py",
        "        if started - self._last_ok >= self.ttl_s:\n",
        "        if False:  # MUTANT: after a Redis restart, always put the lease back\n",
        PROTOCOL,
    ),
    Mutation(
        "admission-takes-unreachable-redis-as-owner-gone",
        "a successor is admitted only on evidence (Redis answered: the owner's lease is gone)",
        "surehand/dispatcher/admission.py",
        "            return True\n\n\ndef _still_waiting",
        "            return False  # MUTANT: no answer, no owner\n\n\ndef _still_waiting",
        PROTOCOL,
    ),
    Mutation(
        "fence-drops-running-clause",
        "no write of a fenced attempt applied; each refused one recorded",
        "surehand/store/fence.py",
        "        attempts.c.state == AttemptState.RUNNING.value,\n",
        "",
        PROTOCOL,
    ),
    Mutation(
        "loss-opens-case-without-ending-attempt",
        "at most one running attempt per TASK",
        "surehand/dispatcher/recovery.py",
        "            if not attempts.finish(\n"
        "                connection, attempt.attempt_id, expect=AttemptState.RUNNING, "
        "state=state, now=now\n"
        "            ):\n",
        "            if attempts.get(connection, attempt.attempt_id).state is not "
        "AttemptState.RUNNING:  # type: ignore[union-attr]  # MUTANT: the case records "
        "the loss\n",
        PROTOCOL,
    ),
    Mutation(
        "agent-failure-ends-attempt-without-case",
        "no TASK in active without a running attempt, an open case or a hold",
        "surehand/dispatcher/attempt_ends.py",
        "        _end(session, connection, state, error, cause)\n"
        "        _open_case(session, connection)\n",
        "        _end(session, connection, state, error, cause)\n"
        "        # MUTANT: the reconciler's safety net opens the case\n",
        PROTOCOL,
    ),
    Mutation(
        "single-open-intent-reexecuted-without-key",
        "an effect runs twice only after a review said absent, or under its key (keyed policy)",
        "surehand/dispatcher/effects.py",
        "    if len(open_ops) == 1 and keyed(open_ops[0]):\n",
        "    if len(open_ops) == 1:  # MUTANT: one open intent is safe to repeat\n",
        PROTOCOL,
    ),
    Mutation(
        "fenced-write-recorded-every-time",
        "no write of a fenced attempt applied; each refused one recorded once",
        "surehand/store/events.py",
        "    if connection.execute(select(seen)).scalar():\n        return False\n",
        "    # MUTANT: every refusal is evidence of its own\n",
        PROTOCOL,
    ),
    Mutation(
        "review-by-anyone-releases-hold",
        "a held TASK is released only by its approver's review",
        "surehand/dispatcher/reviews.py",
        '    check_approver(task, request.actor, f"review {request.case_id}")\n',
        "",
        PROTOCOL,
    ),
    Mutation(
        "receipt-read-without-its-tenant",
        "a submission id never names two TASKs (nor a TASK of another submission)",
        "surehand/store/receipts.py",
        '        receipts.c.tenant == bindparam("tenant"),\n',
        "        # MUTANT: a submission id is unique enough on its own\n",
        SUBMISSIONS,
    ),
    Mutation(
        "receipt-reused-without-comparing-the-request",
        "a submission id names one request: a different request under it is a typed conflict",
        "surehand/dispatcher/replay.py",
        "    if receipt.request_digest != call.digest:\n",
        "    if False:  # MUTANT: the submission id says it all\n",
        SUBMISSIONS,
    ),
)


@dataclass
class Outcome:
    name: str
    invariant: str
    test: str
    diff: str
    caught_default: bool
    caught_explore: bool
    caught_replay: bool
    seconds_default: float
    seconds_explore: float
    counterexample: str
    message: str


def scratch_copy(mutation: Mutation, into: Path) -> tuple[str, str]:
    """Copy the package and the tests into ``into`` and patch the copy; (original, mutant)."""
    for part in ("surehand", "tests"):
        shutil.copytree(
            REPO / part, into / part, ignore=shutil.ignore_patterns("__pycache__", ".hypothesis")
        )
    shutil.copy2(REPO / "pyproject.toml", into / "pyproject.toml")
    original = (REPO / mutation.path).read_text(encoding="utf-8")
    if original.count(mutation.old) != 1:
        raise SystemExit(f"{mutation.name}: the text to change is not found once")
    mutant = original.replace(mutation.old, mutation.new)
    (into / mutation.path).write_text(mutant, encoding="utf-8")
    return original, mutant


def imports_the_copy(where: Path) -> bool:
    """The scratch copy's ``surehand`` shadows the worktree's (editable) install."""
    done = subprocess.run(
        [str(REPO / ".venv" / "bin" / "python"), "-c", "import surehand; print(surehand.__file__)"],
        cwd=where,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip().startswith(str(where))


def run(
    where: Path, test: str, examples: int | None, seed: int, selection: str = ""
) -> tuple[bool, float, str]:
    """Run the guarding machine test; (failed, seconds, output). The default budget's run
    only says whether it is caught (unshrunk, fast); the exploration's run shrinks."""
    env = dict(os.environ)
    env.pop("SUREHAND_TEST_EXPLORE_EXAMPLES", None)
    env.pop("SUREHAND_TEST_EXPLORE_NO_SHRINK", None)
    env.setdefault("SUREHAND_TEST_EXPLORE_SHRINK_SECONDS", "90")
    if examples is not None:
        env["SUREHAND_TEST_EXPLORE_EXAMPLES"] = str(examples)
    else:
        env["SUREHAND_TEST_EXPLORE_NO_SHRINK"] = "1"
    command = [
        str(REPO / ".venv" / "bin" / "python"),
        "-m",
        "pytest",
        "-q",
        "-n",
        "0",
        "-p",
        "no:cacheprovider",
        "-x",
        "--timeout=0",
        f"--hypothesis-seed={seed}",
        test,
        "-k",
        selection or MACHINE_TESTS[test],
    ]
    started = time.perf_counter()
    done = subprocess.run(command, cwd=where, env=env, capture_output=True, text=True, check=False)
    return done.returncode != 0, time.perf_counter() - started, done.stdout + done.stderr


def counterexample(output: str) -> tuple[str, str]:
    """The steps hypothesis printed for the first (shrunk) failing case, and its assertion.
    (Several distinct failures come as an exception group, their lines prefixed by ``|``.)"""
    lines = [re.sub(r"^[E\s|+-]*", "", line).rstrip() for line in output.splitlines()]
    blocks: list[list[str]] = []
    for line in lines:
        if re.fullmatch(r"state = \w+\(\)", line):
            blocks.append([line])
        elif blocks and re.fullmatch(r"(\w+(, \w+)* = )?state\.\w+\(.*\)", line):
            blocks[-1].append(line)
    quiet = ("protocol_holds()", "a_submission_names_one_task()")
    steps = [line for line in (blocks[0] if blocks else []) if not line.endswith(quiet)]
    errors = [line for line in lines if re.match(r"(AssertionError|tests\.\S+: )", line)]
    return "\n".join(steps), (errors[0][:400] if errors else "")


def mutate(mutation: Mutation, examples: int, seed: int) -> Outcome:
    with tempfile.TemporaryDirectory(prefix="surehand-mutant-") as scratch:
        where = Path(scratch)
        original, mutant = scratch_copy(mutation, where)
        if not imports_the_copy(where):
            raise SystemExit("the scratch copy does not shadow the installed surehand")
        diff = "".join(
            difflib.unified_diff(
                original.splitlines(keepends=True),
                mutant.splitlines(keepends=True),
                f"a/{mutation.path}",
                f"b/{mutation.path}",
                n=2,
            )
        )
        caught_default, seconds_default, out_default = run(where, mutation.test, None, seed)
        caught_explore, seconds_explore, out_explore = (
            run(where, mutation.test, examples, seed) if examples > 0 else (False, 0.0, "")
        )
        caught_replay, _, _ = run(where, mutation.test, None, seed, REPLAY_TESTS[mutation.test])
    steps, message = counterexample(out_explore if caught_explore else out_default)
    return Outcome(
        mutation.name,
        mutation.invariant,
        mutation.test,
        diff,
        caught_default,
        caught_explore,
        caught_replay,
        round(seconds_default, 1),
        round(seconds_explore, 1),
        steps,
        message,
    )


def report(outcomes: list[Outcome], examples: int, seed: int) -> Path:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    RESULTS.mkdir(parents=True, exist_ok=True)
    lines = [
        f"# Explore mutations, {stamp}",
        "",
        "Each mutant was run against its explore test on SQLite + fakeredis with the default "
        "suite's budget (derandomised)"
        + (
            f" and once with {examples} examples (--hypothesis-seed={seed})"
            if examples > 0
            else " (no exploration run: --examples 0)"
        )
        + ", and against the machine's plain regression tests. "
        "Produced by `bench/tools/explore_mutations.py`.",
        "",
        "| mutation | invariant | machine, default budget | machine, explore | regression tests |",
        "|---|---|---|---|---|",
    ]
    for o in outcomes:
        lines.append(
            f"| {o.name} | {o.invariant} | {_yes(o.caught_default, o.seconds_default)} | "
            f"{_explored(o, examples)} | "
            f"{'yes' if o.caught_replay else 'NO'} |"
        )
    for o in outcomes:
        lines += [
            "",
            f"## {o.name}",
            "",
            f"Invariant: {o.invariant}. Test: `{o.test}`.",
            "",
            "```diff",
            o.diff.rstrip(),
            "```",
            "",
            f"Assertion: `{o.message}`" if o.message else "Not caught.",
            "",
            "Shrunk counterexample (exploration run):"
            if o.caught_explore
            else "Counterexample (default-budget run, not shrunk):"
            if o.caught_default
            else "Counterexample: none from the machine (see the regression tests).",
            "",
            "```python",
            o.counterexample or "(none)",
            "```",
        ]
    path = RESULTS / f"explore-mutations-{stamp}.md"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    path.with_suffix(".json").write_text(
        json.dumps([asdict(o) for o in outcomes], indent=2) + "\n", encoding="utf-8"
    )
    return path


def _explored(outcome: Outcome, examples: int) -> str:
    return _yes(outcome.caught_explore, outcome.seconds_explore) if examples > 0 else "not run"


def _yes(caught: bool, seconds: float) -> str:
    return f"{'yes' if caught else 'NO'} ({seconds:g} s)"


def _stop(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")  # unwinds: the scratch copy is removed


def main() -> int:
    signal.signal(signal.SIGTERM, _stop)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=200, help="0: the default budget only")
    parser.add_argument("--seed", type=int, default=35)
    parser.add_argument("--only", action="append", default=[])
    args = parser.parse_args()
    chosen = [m for m in MUTATIONS if not args.only or m.name in args.only]
    outcomes = []
    for mutation in chosen:
        outcome = mutate(mutation, args.examples, args.seed)
        outcomes.append(outcome)
        print(  # the table is the output
            f"{outcome.name:<52} "
            f"default: {_yes(outcome.caught_default, outcome.seconds_default):<12}"
            f" explore: {_explored(outcome, args.examples):<12}"
            f" regression tests: {'yes' if outcome.caught_replay else 'NO'}",
            flush=True,
        )
    print(f"written: {report(outcomes, args.examples, args.seed)}")
    return (
        0 if all(o.caught_default or o.caught_explore or o.caught_replay for o in outcomes) else 1
    )


if __name__ == "__main__":
    sys.exit(main())
