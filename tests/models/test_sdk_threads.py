"""A worker's first units parse their first replies on threads of one process at once: the
model SDKs' deferred pydantic models must build then without a thread seeing one half built
(pydantic before 2.14 let them: 3 of 10 units of a run were a ``PydanticUserError``)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

#: one fresh process: its threads meet, then each reads an SDK reply as the model layer does
FIRST_REPLIES = """
import json, sys, threading
from anthropic._models import construct_type as anthropic_reply
from anthropic.types import Message
from openai._models import construct_type as openai_reply
from openai.types.chat import ChatCompletion

CHAT = {"id": "c", "object": "chat.completion", "created": 1, "model": "gpt-4o", "choices": [{"index": 0,
    "finish_reason": "stop", "message": {"role": "assistant", "content": "hi", "refusal": None}}],
    "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15}}
MESSAGE = {"id": "m", "type": "message", "role": "assistant", "model": "claude-haiku-4-5", "stop_reason": "end_turn",
    "content": [{"type": "text", "text": "hi"}], "usage": {"input_tokens": 12, "output_tokens": 3}}
barrier, errors = threading.Barrier(10), []

def first_reply(index):
    try:
        barrier.wait()
        if index % 2:
            reply = openai_reply(type_=ChatCompletion, value=CHAT)
            reply.usage.model_dump(), reply.choices[0].message.refusal, reply.model_dump()
        else:
            reply = anthropic_reply(type_=Message, value=MESSAGE)
            reply.usage.model_dump(), reply.model_dump()
    except Exception as exc:
        errors.append(f"{type(exc).__name__}: {exc}")

sys.setswitchinterval(1e-6)  # a thread switch at almost every step
threads = [threading.Thread(target=first_reply, args=(index,)) for index in range(10)]
[thread.start() for thread in threads]
[thread.join() for thread in threads]
print(json.dumps(errors))
"""


@pytest.mark.parametrize("attempt", range(2))
def test_a_workers_first_replies_parse_on_many_threads_at_once(attempt: int) -> None:
    done = subprocess.run(
        [sys.executable, "-c", FIRST_REPLIES], check=False, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout) == []
