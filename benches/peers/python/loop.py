"""The plain OpenAI SDK contender of benches/peers: a hand-written tool loop on the official
`openai` client (chat completions, whole answers), driven against `keel mock-provider` the way
`keel bench --http` drives keel: one warm-up conversation, then N concurrent conversations
walking the mock's per-turn script. Prints one JSON line of what it measured.

    python loop.py --url URL [--conversations N] [--expect-calls K]   # measured, JSON
    python loop.py --url URL --once                                    # one conversation
"""

import argparse
import asyncio
import itertools
import json
import resource
import sys
import time

from openai import AsyncOpenAI

MODEL = "bench-model"
MAX_CALLS = 64
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "Looks an item up in the stock table.",
            "parameters": {
                "type": "object",
                "properties": {"item": {"type": "string"}},
                "required": ["item"],
            },
        },
    }
]
STOCK = itertools.count()


def lookup(item):
    """The bench's tool, as keel bench's: no I/O, each answer its own text."""
    return f"{item}: {next(STOCK)} in stock"


async def converse(client, task):
    """One conversation: the model is asked until it answers without tool calls.
    Returns the answer and the number of model calls."""
    messages = [{"role": "user", "content": task}]
    for calls in range(1, MAX_CALLS + 1):
        reply = await client.chat.completions.create(
            model=MODEL, messages=messages, tools=TOOLS
        )
        message = reply.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            return message.content, calls
        for call in message.tool_calls:
            arguments = json.loads(call.function.arguments or "{}")
            output = lookup(arguments.get("item", "?"))
            messages.append(
                {"role": "tool", "tool_call_id": call.id, "content": output}
            )
    raise RuntimeError(f"no answer after {MAX_CALLS} model calls")


def peak_rss_mib():
    """Peak resident memory of this process (VmHWM), in MiB."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--conversations", type=int, default=1)
    parser.add_argument("--expect-calls", type=int, default=0)
    parser.add_argument("--once", action="store_true")
    args = parser.parse_args()
    client = AsyncOpenAI(base_url=args.url, api_key="not-a-key", max_retries=0)

    if args.once:
        answer, _ = await converse(client, "Say hello.")
        print(answer)
        return

    # Unmeasured, as keel bench's warm-up.
    _, calls = await converse(client, "Look up every item on the list.")
    if args.expect_calls and calls != args.expect_calls:
        sys.exit(f"the warm-up made {calls} model calls, not {args.expect_calls}")

    started = time.perf_counter()
    results = await asyncio.gather(
        *(
            converse(client, f"Look up every item on list {i}.")
            for i in range(args.conversations)
        )
    )
    wall = time.perf_counter() - started
    total = sum(calls for _, calls in results)
    print(
        json.dumps(
            {
                "contender": "python-openai",
                "conversations": args.conversations,
                "model_calls": total,
                "wall_s": wall,
                "ms_per_call": wall * 1000 / total,
                "calls_per_s": total / wall,
                "peak_rss_mib": peak_rss_mib(),
            }
        )
    )


if __name__ == "__main__":
    asyncio.run(main())
