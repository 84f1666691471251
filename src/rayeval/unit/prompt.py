"""The text an agent receives: the eval's task plus where its data is and where to answer.

Two answer conventions name the answer file and the completion marker in what an agent is
told: ``legacy`` (``eval_answer.json``, ``COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT``: the default)
and ``benchmark`` (``analysis_output.json``, ``RUN_COMPLETE``), latch-eval-tools' neutral names
under its ``benchmark=True`` mode. Only rayeval's own text is rewritten, never the eval's task;
answers are read under either name whatever the convention.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

AnswerConvention = Literal["legacy", "benchmark"]
ANSWER_CONVENTIONS: tuple[AnswerConvention, ...] = ("legacy", "benchmark")

ANSWER_FILE = "eval_answer.json"
BENCHMARK_ANSWER_FILE = "analysis_output.json"
COMPLETION_MARKER = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
BENCHMARK_COMPLETION_MARKER = "RUN_COMPLETE"
#: Ends the eval's task in the prompt; the working conventions follow.
TASK_END = "\n\n---\n"


def in_convention(text: str, convention: AnswerConvention) -> str:
    """``text`` (rayeval's own instructions) with the convention's answer-file name and
    completion marker: the legacy names replaced under ``benchmark``, unchanged otherwise."""
    if convention == "legacy":
        return text
    return text.replace(COMPLETION_MARKER, BENCHMARK_COMPLETION_MARKER).replace(ANSWER_FILE, BENCHMARK_ANSWER_FILE)


def build_prompt(task: str, work_dir: Path, staged_paths: list[str], convention: AnswerConvention = "legacy") -> str:
    """Task first, unchanged; then the working conventions. Nothing about grading."""
    data_dir = work_dir / "data"
    if staged_paths:
        listing = "\n".join(f"  - {work_dir / p}" for p in staged_paths)
        data_text = f"Your input data is staged read-only in {data_dir}/:\n{listing}\nNo other data needs downloading."
    else:
        data_text = "This task has no input data files."
    answer_file = in_convention(ANSWER_FILE, convention)
    return (
        f"{task}{TASK_END}"
        f"Working directory: {work_dir}\n"
        f"{data_text}\n"
        f"Write your final answer as a JSON object to {work_dir / answer_file} "
        f"(or end your reply with <EVAL_ANSWER>{{...}}</EVAL_ANSWER>), following the answer format above."
    )


def task_of(prompt: str) -> str:
    """The eval's task in a prompt made by :func:`build_prompt` (a task holding ``TASK_END``
    itself is cut there: only for tasks rayeval writes, such as a datapoint's JSON)."""
    return prompt.split(TASK_END, 1)[0]
