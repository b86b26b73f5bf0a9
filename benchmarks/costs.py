"""What will it cost? (issue 20): the batches a --batch run takes, the dry run's estimate against what the local
server then counts, the paper's FairEval run online and in batches, and what the estimate costs a run's start.

    python benchmarks/costs.py [--sizes 5,50,500] [--section batches|accuracy|faireval|startup ...]

Everything runs against the project's fake OpenAI server on 127.0.0.1 (jurygraph.testing.fake_server: chat
completions, Files and Batches) through `jurygraph eval`; nothing leaves the machine. Token counts: the dry run
uses tiktoken when its encoding files are cached (TIKTOKEN_CACHE_DIR), else UTF-8 bytes / 4.8; the server counts
GPT-4's pre-tokenizer pieces (fake_server.count_tokens). The output says which.

Sections:
- batches: `--batch` runs of ChatEval one-by-one 2 x 2 (SummEval coherence), DEBATE n = 4 (a Critic that objects
  once, then says NO ISSUE) and ReFeR-Turbo (3 peers, an area chair with n = 20), at each size: batches, requests
  per batch, wall time with --batch-poll 0.01 (the fake finishes a batch in 4 polls), and the online run's
  verdicts compared.
- accuracy: `--dry-run --json`, then the same command run, for five fixed plans and DEBATE's two bounds: requests
  and input tokens, estimate / measured (replies scripted at the output budget, --gen '*.max_tokens=60').
- faireval: the paper's FairEval run (ChatEval one-by-one, 2 referees, 2 turns, both answer orders, 80 questions)
  as a dry run with GPT-4 and ChatGPT at today's list prices and at the 2023 prices the paper paid, beside the
  paper's Table 6 (ICLR version, appendix E), online and at batch prices.
- startup: `jurygraph eval` from the command's start to its first request at the server, with the one-line
  estimate and with --quiet (no estimate), alternated; and the estimate's own time in-process per protocol.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from jurygraph.cli import main as cli
from jurygraph.running.rundir import read_results
from jurygraph.testing.fake_server import FakeOpenAIServer, count_tokens, prompt_of

BUDGET = 60
PROSE = ("The answer is clear and accurate, but it leaves out a step that a careful reader would want explained "
         "before trusting the conclusion it reaches in the end.")
# the paper's prices (2023: gpt-4-0613 8k context, gpt-3.5-turbo-0613), USD per million tokens
PRICES_2023 = {"gpt-4": {"input": 30.0, "output": 60.0}, "gpt-3.5-turbo": {"input": 1.5, "output": 2.0}}
# ChatEval ICLR, appendix E, Table 6 "Average Cost on FairEval"
PAPER_TABLE_6 = {"gpt-4": {"single": 2.90, "multi": 12.30}, "gpt-3.5-turbo": {"single": 0.11, "multi": 0.41}}


def filler(tokens: int) -> str:
    words, out = PROSE.split(), []
    while count_tokens(" ".join(out)) < tokens:
        out.append(words[len(out) % len(words)])
    return " ".join(out)


def respond(request: dict[str, Any], index: int, *, no_issue_after: int = 1, budget: int | None = None) -> str:
    """Replies in each protocol's answer form; DEBATE's Critic objects ``no_issue_after`` times, then NO ISSUE."""
    system = str(request["messages"][0].get("content", ""))
    if "Devil’s Advocate" in system:
        reviews = sum(m["role"] == "assistant" for m in request["messages"])
        if reviews >= no_issue_after:
            return "NO ISSUE"
        return "I disagree: " + filler((budget or 20) - 4)
    line = ("\nThe score of Assistant 1: 8\nThe score of Assistant 2: 6" if "Assistant 1" in prompt_of(request)
            else f"\nScore: {1 + index % 3}")
    # each request its own words, as a model's (identical discussions would make identical summarizer prompts)
    line = f" (on {hashlib.sha256(prompt_of(request).encode()).hexdigest()[:8]})" + line
    return filler((budget or 20) - count_tokens(line)) + line


def quiet_cli(args: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = cli(args)
    return code, out.getvalue()


# --- batches per run ---

PLANS = {
    "chateval one-by-one 2x2": ["--protocol", "chateval", "--dataset", "summeval", "--aspect", "coherence"],
    "debate n=4 (objects once)": ["--protocol", "debate", "--dataset", "summeval", "--aspect", "coherence"],
    "refer turbo K=3 n=20": ["--protocol", "refer", "--dataset", "topical-chat", "--aspect", "coherence"],
}


def batches(sizes: list[int], work: Path) -> None:
    print("\n### Batches per run (--batch, --batch-poll 0.01)\n")
    print("| plan | items | batches | requests per batch | seconds | online seconds (zero latency) | "
          "same verdicts as online |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, plan in PLANS.items():
        for n in sizes:
            online, batched = FakeOpenAIServer(respond).start(), FakeOpenAIServer(respond).start()
            try:
                common = [*plan, "--limit", str(n), "--model", "gpt-4o-mini", "--quiet", "--concurrency", "50"]
                started = time.perf_counter()
                quiet_cli(["eval", *common, "--base-url", online.base_url, "--out", str(work / f"o-{name}-{n}")])
                online_seconds = time.perf_counter() - started
                started = time.perf_counter()
                code, _ = quiet_cli(["eval", *common, "--base-url", batched.base_url, "--out",
                                     str(work / f"b-{name}-{n}"), "--batch", "--batch-poll", "0.01"])
                seconds = time.perf_counter() - started
                same = _verdicts(work / f"o-{name}-{n}") == _verdicts(work / f"b-{name}-{n}")
                sizes_of = [len(lines) for lines in batched.batches.created]
                print(f"| {name} | {n} | {len(sizes_of)} | {', '.join(map(str, sizes_of))} | {seconds:.1f} | "
                      f"{online_seconds:.1f} | {'yes' if same and code == 0 else 'NO'} |")
            finally:
                online.stop()
                batched.stop()


def _verdicts(out: Path) -> dict[str, Any]:
    return {r["id"]: r["verdict"] for r in read_results(out)}


# --- the estimate against the server ---

ACCURACY = {
    "chateval one-by-one, both orders (faireval)": ["--protocol", "chateval", "--dataset", "faireval"],
    "chateval summarizer, 3 referees (summeval)": ["--protocol", "chateval", "--strategy", "summarizer", "--agents",
                                                   "3", "--dataset", "summeval", "--aspect", "coherence"],
    "refer turbo, n = 20 (topical-chat)": ["--protocol", "refer", "--dataset", "topical-chat", "--aspect",
                                           "coherence"],
    "geval, n = 20 (summeval fluency)": ["--protocol", "geval", "--dataset", "summeval", "--aspect", "fluency"],
    "faireval bpc+mec": ["--protocol", "single", "--calibrate", "bpc+mec", "--dataset", "faireval"],
    "debate, Critic: NO ISSUE at once": ["--protocol", "debate", "--dataset", "summeval", "--aspect", "coherence"],
    "debate, Critic: never NO ISSUE": ["--protocol", "debate", "--dataset", "summeval", "--aspect", "coherence"],
}


def accuracy(work: Path, items: int) -> None:
    print(f"\n### The dry run against the local server ({items} items, replies at the budget)\n")
    print("| plan | requests: estimate | requests: server | input tokens: estimate | measured | ratio | "
          "tokenizer |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for number, (name, plan) in enumerate(ACCURACY.items()):
        never = "never" in name
        server = FakeOpenAIServer(lambda r, i, never=never: respond(r, i, no_issue_after=99 if never else 0,
                                                                    budget=BUDGET)).start()
        try:
            common = [*plan, "--limit", str(items), "--model", "judge", "--base-url", server.base_url, "--gen",
                      f"*.max_tokens={BUDGET}"]
            _, printed = quiet_cli(["eval", *common, "--dry-run", "--json"])
            estimate = json.loads(printed)
            quiet_cli(["eval", *common, "--out", str(work / f"accuracy-{number}"), "--quiet"])
            counts = json.loads((work / f"accuracy-{number}" / "manifest.json").read_text())["counts"]
            requests, tokens = estimate["requests"], estimate["input_tokens"]
            if isinstance(requests, dict):
                bound = "max" if never else "min"
                requests, tokens = f"{requests['min']}-{requests['max']} ({bound})", tokens[bound]
            tokenizer = next(iter(estimate["by_model"].values()))["tokenizer"].split(":")[0]
            print(f"| {name} | {requests} | {len(server.requests)} | {tokens:,} | {counts['input_tokens']:,} | "
                  f"{tokens / counts['input_tokens']:.3f} | {tokenizer} |")
        finally:
            server.stop()


# --- the paper's FairEval run ---

def faireval(work: Path) -> None:
    print("\n### The paper's FairEval run (ChatEval ICLR Table 6), dry run\n")
    prices = work / "prices-2023.json"
    prices.write_text(json.dumps(PRICES_2023))
    print("| model | plan | requests | input tokens | output tokens | today: online | today: batch | "
          "2023 prices: online | 2023: batch | paper's Table 6 |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for model in ("gpt-4", "gpt-3.5-turbo"):
        for plan, protocol, extra in (("multi (ChatEval, 2x2, both orders)", "chateval", []),
                                      ("multi, replies of 150 tokens", "chateval", ["--gen", "*.max_tokens=150"]),
                                      ("multi, one order, replies of 150 tokens", "chateval",
                                       ["--gen", "*.max_tokens=150", "--no-calibrate"]),
                                      ("single (one agent, both orders)", "single", []),
                                      ("single, one order, replies of 150 tokens", "single",
                                       ["--gen", "*.max_tokens=150", "--no-calibrate"])):
            base = ["eval", "--protocol", protocol, "--dataset", "faireval", "--model", f"openai:{model}",
                    "--dry-run", "--json", *extra]
            today = json.loads(quiet_cli(base)[1])
            paid = json.loads(quiet_cli([*base, "--prices", str(prices)])[1])
            paper = PAPER_TABLE_6[model]["multi" if protocol == "chateval" else "single"]
            print(f"| {model} | {plan} | {today['requests']:,} | {today['input_tokens']:,} | "
                  f"{today['output_tokens']:,} | ${today['cost_usd']:.2f} | ${today['cost_usd_batch']:.2f} | "
                  f"${paid['cost_usd']:.2f} | ${paid['cost_usd_batch']:.2f} | ${paper:.2f} |")
    tokenizer = today["by_model"][f"openai:{model}"]["tokenizer"]
    print(f"\ntokenizer: {tokenizer}; output at max_tokens 512 (ChatEval's cap) unless said")


# --- start-up ---

def startup(work: Path, repeats: int) -> None:
    print("\n### What the estimate costs a run's start\n")
    first: dict[str, list[float]] = {"estimate line": [], "--quiet (no estimate)": []}
    for run in range(repeats):
        for label, extra in (("estimate line", []), ("--quiet (no estimate)", ["--quiet"])):
            times: list[float] = []

            def answer(request: dict[str, Any], index: int, times: list[float] = times) -> str:
                times.append(time.time())
                return respond(request, index)

            server = FakeOpenAIServer(answer).start()
            try:
                out = work / f"start-{run}-{len(extra)}"
                started = time.time()
                subprocess.run([sys.executable, "-m", "jurygraph.cli", "eval", "--protocol", "chateval", "--dataset",
                                "faireval", "--limit", "20", "--model", "judge", "--base-url", server.base_url,
                                "--out", str(out), *extra], check=True, capture_output=True)
                first[label].append(times[0] - started)
            finally:
                server.stop()
    for label, values in first.items():
        print(f"- first request after the command's start, {label}: median {statistics.median(values):.2f} s "
              f"(runs: {', '.join(f'{v:.2f}' for v in values)})")
    import argparse as _argparse

    from jurygraph.cli.costs import pre_run_estimate
    from jurygraph.cli.eval import add_eval_arguments
    from jurygraph.cli.options import context_from_args
    from jurygraph.cli.protocols import build_protocol
    from jurygraph.running.datasets import load_dataset

    parser = _argparse.ArgumentParser()
    add_eval_arguments(parser)
    for plan in (["--protocol", "chateval", "--dataset", "faireval"],
                 ["--protocol", "debate", "--dataset", "summeval", "--aspect", "coherence"],
                 ["--protocol", "refer", "--dataset", "topical-chat", "--aspect", "coherence"]):
        args = parser.parse_args([*plan, "--model", "openai:gpt-4o-mini"])
        items = load_dataset(args.dataset, aspect=args.aspect)
        setup = build_protocol(args)
        context = context_from_args(args, setup)
        spent = []
        for _ in range(5):
            started = time.perf_counter()
            pre_run_estimate(setup, context, items, len(items), None)
            spent.append(time.perf_counter() - started)
        print(f"- the estimate before a run (3 items rendered), {plan[1]}: {1000 * statistics.median(spent):.0f} ms "
              f"(first call {1000 * spent[0]:.0f} ms)")
    for plan, limit in ((["--protocol", "chateval", "--dataset", "faireval"], "80"),
                        (["--protocol", "debate", "--dataset", "summeval", "--aspect", "coherence"], "1600")):
        started = time.perf_counter()
        _, printed = quiet_cli(["eval", *plan, "--model", "openai:gpt-4o-mini", "--limit", limit, "--dry-run",
                                   "--json"])
        report = json.loads(printed)
        print(f"- the dry run, {plan[1]} on {report['items']} items ({report['items_rendered']} rendered): "
              f"{time.perf_counter() - started:.1f} s in all, {report['seconds']:.1f} s rendering")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="5,50,500", help="items per batch run (default 5,50,500)")
    parser.add_argument("--accuracy-items", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=5, help="start-up: runs of each kind (default 5)")
    parser.add_argument("--section", action="append", choices=("batches", "accuracy", "faireval", "startup"))
    args = parser.parse_args()
    sections = args.section or ["batches", "accuracy", "faireval", "startup"]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if "batches" in sections:
            batches([int(n) for n in args.sizes.split(",")], work)
        if "accuracy" in sections:
            accuracy(work, args.accuracy_items)
        if "faireval" in sections:
            faireval(work)
        if "startup" in sections:
            startup(work, args.repeats)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
