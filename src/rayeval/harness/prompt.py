"""The text an agent receives: the eval's task plus where its data is and where to answer."""

from __future__ import annotations

from pathlib import Path

ANSWER_FILE = "eval_answer.json"
#: Ends the eval's task in the prompt; the working conventions follow.
TASK_END = "\n\n---\n"


def build_prompt(task: str, work_dir: Path, staged_paths: list[str]) -> str:
    """Task first, unchanged; then the working conventions. Nothing about grading."""
    data_dir = work_dir / "data"
    if staged_paths:
        listing = "\n".join(f"  - {work_dir / p}" for p in staged_paths)
        data_text = f"Your input data is staged read-only in {data_dir}/:\n{listing}\nNo other data needs downloading."
    else:
        data_text = "This task has no input data files."
    return (
        f"{task}{TASK_END}"
        f"Working directory: {work_dir}\n"
        f"{data_text}\n"
        f"Write your final answer as a JSON object to {work_dir / ANSWER_FILE} "
        f"(or end your reply with <EVAL_ANSWER>{{...}}</EVAL_ANSWER>), following the answer format above."
    )


def task_of(prompt: str) -> str:
    """The eval's task in a prompt made by :func:`build_prompt` (a task holding ``TASK_END``
    itself is cut there: only for tasks rayeval writes, such as a datapoint's JSON)."""
    return prompt.split(TASK_END, 1)[0]
