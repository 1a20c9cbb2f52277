"""Helpers of benches/peers/run.sh (standard library only).

    python3 peers.py scripts DIR      # the mock's scripts, as keel bench makes them
    python3 peers.py table DIR        # the table of DIR's results, with ratios against keel
"""

import json
import pathlib
import statistics
import sys


def loop_script(iterations):
    """keel bench's per-turn script (crates/keel/src/commands/bench/mod.rs, `script`) at 0 ms:
    K - 1 calls of `lookup` with distinct arguments, then the answer; usage reported."""
    steps = [
        {
            "text": f"Looking up item {i}.",
            "tool_calls": [{"name": "lookup", "arguments": {"item": f"item-{i}"}}],
            "usage": {"input_tokens": 400 + 60 * i, "output_tokens": 24},
        }
        for i in range(1, iterations)
    ]
    steps.append(
        {
            "text": "Every item is looked up: all of them are in stock.",
            "usage": {"input_tokens": 400 + 60 * iterations, "output_tokens": 16},
        }
    )
    return {"steps": steps, "per_turn": True}


def scripts(directory):
    out = pathlib.Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    for iterations in (11, 21):
        (out / f"loop-{iterations}.json").write_text(json.dumps(loop_script(iterations)))
    answer = {
        "steps": [{"text": "Hello.", "usage": {"input_tokens": 40, "output_tokens": 2}}],
        "per_turn": True,
    }
    (out / "answer.json").write_text(json.dumps(answer))


def median_of(paths, read):
    values = [read(json.loads(p.read_text())) for p in paths]
    return statistics.median(values) if values else None


def start_to_answer(path):
    """hyperfine's median, in seconds."""
    if not path.exists():
        return None
    return json.loads(path.read_text())["results"][0]["median"]


CONTENDERS = [
    ("rig 0.46 (Rust; stores nothing)", "rig"),
    ("plain OpenAI SDK loop (Python)", "python"),
    ("keel, memory store", "keel-memory"),
    ("keel, SQLite", "keel-sqlite"),
]


def measures(out, key):
    """One contender's numbers from its result files (medians of the repeats)."""
    one = sorted(out.glob(f"{key}.one.*.json"))
    many = sorted(out.glob(f"{key}.many.*.json"))
    if key.startswith("keel"):
        # keel bench --json: wall over the conversation's model calls; iterations/s.
        iterations = 21
        ms_iter = median_of(one, lambda r: r["wall_ms"] / iterations)
        calls = median_of(many, lambda r: r["iterations_per_sec"])
        rss_one = median_of(one, lambda r: r["peak_rss_mib"])
        rss_many = median_of(many, lambda r: r["peak_rss_mib"])
    else:
        ms_iter = median_of(one, lambda r: r["ms_per_call"])
        calls = median_of(many, lambda r: r["calls_per_s"])
        rss_one = median_of(one, lambda r: r["peak_rss_mib"])
        rss_many = median_of(many, lambda r: r["peak_rss_mib"])
    start = start_to_answer(out / f"{key}.start.json")
    return {"ms_iter": ms_iter, "start": start, "calls": calls, "rss": (rss_one, rss_many)}


def fmt(value, pattern):
    return "—" if value is None else pattern.format(value)


def ratio(value, base, higher_is_better):
    if value is None or base is None or value == 0 or base == 0:
        return "—"
    factor = base / value if higher_is_better else value / base
    return f"{factor:.2f}×"


def table(directory):
    out = pathlib.Path(directory)
    rows = {key: measures(out, key) for _, key in CONTENDERS}
    base = rows["keel-sqlite"]
    print("| contender | warm ms/iter | start→answer | model calls/s, C=100, 0 ms | peak RSS 1 conv / C=100 |")
    print("| --- | --- | --- | --- | --- |")
    for name, key in CONTENDERS:
        row = rows[key]
        rss = "{} / {} MiB".format(fmt(row["rss"][0], "{:.0f}"), fmt(row["rss"][1], "{:.0f}"))
        print(
            f"| {name} | {fmt(row['ms_iter'], '{:.2f}')} | {fmt(row['start'], '{:.3f} s')} "
            f"| {fmt(row['calls'], '{:,.0f}')} | {rss} |"
        )
    print()
    print("Each against keel with SQLite (above 1× = keel is ahead by that factor):")
    print()
    print("| contender | warm ms/iter | start→answer | model calls/s | peak RSS 1 conv | peak RSS C=100 |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, key in CONTENDERS:
        if key == "keel-sqlite":
            continue
        row = rows[key]
        print(
            f"| {name} | {ratio(row['ms_iter'], base['ms_iter'], False)} "
            f"| {ratio(row['start'], base['start'], False)} "
            f"| {ratio(row['calls'], base['calls'], True)} "
            f"| {ratio(row['rss'][0], base['rss'][0], False)} "
            f"| {ratio(row['rss'][1], base['rss'][1], False)} |"
        )


if __name__ == "__main__":
    command, directory = sys.argv[1], sys.argv[2]
    {"scripts": scripts, "table": table}[command](directory)
