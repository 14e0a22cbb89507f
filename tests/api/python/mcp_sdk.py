"""Drives `quest mcp` with the official MCP Python SDK, a client nobody here
wrote: the handshake, the four tools and their output schemas, and a quest
worked to PASS. The SDK checks every successful call's structuredContent
against the tool's outputSchema itself and raises when it does not hold.

Run by tests/api/mcp_python.rs with QUEST_BIN, QUEST_URL, QUEST_TOKEN,
QUEST_SESSION, QUEST_AGENT and QUEST_STATE_DIR set; exits non-zero with the
reason when an expectation fails.
"""

import asyncio
import os
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


def field(obj, snake, camel):
    """A field of an SDK model, whichever spelling this SDK version uses."""
    value = getattr(obj, snake, None)
    return value if value is not None else getattr(obj, camel, None)


def text(result):
    return "\n".join(c.text for c in result.content if getattr(c, "type", "") == "text")


def expect(condition, message):
    if not condition:
        print(f"FAILED: {message}", file=sys.stderr)
        sys.exit(1)


async def main():
    server = StdioServerParameters(command=os.environ["QUEST_BIN"], args=["mcp"], env=dict(os.environ))
    async with stdio_client(server) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            instructions = init.instructions or ""
            expect("quest_next" in instructions and "quest_submit" in instructions, instructions)

            listed = await session.list_tools()
            names = sorted(t.name for t in listed.tools)
            expect(names == ["quest_next", "quest_release", "quest_status", "quest_submit"], names)
            for tool in listed.tools:
                output = field(tool, "output_schema", "outputSchema")
                expect(isinstance(output, dict) and output.get("type") == "object", f"{tool.name}: {output}")

            refused = await session.call_tool("quest_release", {})
            expect(field(refused, "is_error", "isError") is True, "releasing nothing is a tool error")
            expect(field(refused, "structured_content", "structuredContent") is None, "an error has no structured content")
            expect(text(refused) == "no quest is leased by this agent: call quest_next first", text(refused))

            next_ = await session.call_tool("quest_next", {})
            data = field(next_, "structured_content", "structuredContent")
            expect(data["status"] == "assigned", data)
            prompt = data["prompt"]
            expect("Call quest_submit with" in prompt, prompt)
            expect("quest submit" not in prompt and "POST /v1" not in prompt, prompt)

            failed = await session.call_tool("quest_submit", {"result": {"email": "nope"}})
            data = field(failed, "structured_content", "structuredContent")
            expect(data["verdict"] == "FAIL" and data["facts"], data)
            expect(data["unchanged"] is False and data["replayed"] is False, data)

            email = "info@" + data_key(next_) + ".test"
            passed = await session.call_tool("quest_submit", {"result": {"email": email}})
            data = field(passed, "structured_content", "structuredContent")
            expect(data["verdict"] == "PASS" and data["state"] == "PASS", data)

            status = await session.call_tool("quest_status", {})
            data = field(status, "structured_content", "structuredContent")
            expect(data["pass"] == 1 and data["remaining"] == 0, data)

            finished = await session.call_tool("quest_next", {})
            data = field(finished, "structured_content", "structuredContent")
            expect(data["status"] == "finished", data)
    print("ok: the MCP Python SDK worked a quest to PASS through quest mcp")


def data_key(result):
    """The company0000-style domain of the assigned quest's key."""
    key = field(result, "structured_content", "structuredContent")["quest"]["key"]
    return key.lower().replace(" ", "")


asyncio.run(main())
