"""rayeval.secrets: which variables are secret, and masking them everywhere."""

from __future__ import annotations

import json
import urllib.parse

import pytest

from rayeval.secrets import (
    MASK,
    environment_secrets,
    is_secret_name,
    redact,
    redact_text,
    run_secrets,
    secret_values,
    without_credentials,
)


@pytest.mark.parametrize(
    "name",
    [
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
        "anthropic_api_key",
        "ANTHROPIC_API_KEY_FALLBACKS",
        "API_KEY",
        "GITHUB_TOKEN",
        "ANTHROPIC_AUTH_TOKEN",
        "AWS_SECRET_ACCESS_KEY",
        "CLIENT_SECRET",
        "DB_PASSWORD",
        "PGPASSWORD",
        "SSH_PRIVATE_KEY_PEM",
    ],
)
def test_secret_names(name: str) -> None:
    assert is_secret_name(name)


@pytest.mark.parametrize(
    "name",
    ["HOME", "PATH", "TOKENIZERS_PARALLELISM", "CLAUDE_CODE_MAX_OUTPUT_TOKENS", "AWS_ACCESS_KEY_ID", "KEYBOARD"],
)
def test_non_secret_names(name: str) -> None:
    assert not is_secret_name(name)


def test_secret_values_collects_keys_and_fallback_lists() -> None:
    env = {
        "OPENAI_API_KEY": "sk-openai-1234567890",
        "ANTHROPIC_API_KEY_FALLBACKS": json.dumps(["sk-ant-fallback-1111", "sk-ant-fallback-2222", ""]),
        "MY_TOKEN": "short",  # too short to mask safely
        "HOME": "/root/very-long-home-path",
        "EMPTY_API_KEY": "",
    }
    found = secret_values(env)
    assert found == {
        "sk-openai-1234567890",
        "sk-ant-fallback-1111",
        "sk-ant-fallback-2222",
        env["ANTHROPIC_API_KEY_FALLBACKS"],
    }
    assert secret_values({}, extra=["explicit-secret-value", "tiny"]) == {"explicit-secret-value"}


def test_redact_nested_structures_without_mutating() -> None:
    secret = "sk-test-SECRET-123"
    original = {
        "answer": {"text": f"key is {secret}!"},
        "list": [secret, 3, None, {"deep": (f"a{secret}b",)}],
        secret: "as a key",
        "n": 1.5,
    }
    snapshot = json.dumps(original, default=list)
    out = redact(original, {secret})
    assert out["answer"]["text"] == f"key is {MASK}!"
    assert out["list"][0] == MASK and out["list"][1] == 3 and out["list"][2] is None
    assert out["list"][3]["deep"] == (f"a{MASK}b",)
    assert MASK in out and out["n"] == 1.5
    assert json.dumps(original, default=list) == snapshot  # input untouched
    assert secret not in json.dumps(out, default=list)


def test_redact_catches_escaped_spellings() -> None:
    secret = 'pa"ss\\word-1234'
    as_json = json.dumps({"v": secret})  # the secret JSON-escaped inside a log line
    double = json.dumps({"line": as_json})  # JSON inside JSON, as in tool results
    quoted = "url?k=" + urllib.parse.quote(secret, safe="")
    for text in (as_json, double, quoted):
        masked = redact_text(text, {secret})
        assert MASK in masked and "word-1234" not in masked, masked


def test_redact_longest_secret_first_and_noop_cases() -> None:
    assert redact_text("abcdefgh-ijklmnop", {"abcdefgh", "abcdefgh-ijklmnop"}) == MASK
    assert redact({"a": "x"}, set()) == {"a": "x"}
    assert redact_text("", {"abcdefgh"}) == ""


def test_a_urls_credentials_are_secret_whatever_its_variable_is_called() -> None:
    env = {
        "HTTPS_PROXY": "http://corp-user:Sup3rS3cret%40Pass@proxy.corp:3128",
        "GIT_REMOTE": "https://ghp_0123456789abcdef@github.com/o/r.git",
        "DOCS": "https://example.org/a@b",
        "SHORT": "http://u:p@proxy:3128",
    }
    assert secret_values(env) == {
        "corp-user:Sup3rS3cret%40Pass", "corp-user:Sup3rS3cret@Pass", "Sup3rS3cret%40Pass", "Sup3rS3cret@Pass",
        "ghp_0123456789abcdef",
    }  # fmt: skip
    assert [without_credentials(value) for value in env.values()] == [
        "http://proxy.corp:3128", "https://github.com/o/r.git", "https://example.org/a@b", "http://proxy:3128",
    ]  # fmt: skip
    assert without_credentials("http://a:b@h1,https://c@h2:8/x@y") == "http://h1,https://h2:8/x@y"


def test_a_runs_secrets_are_what_it_hands_its_agents_whatever_their_names() -> None:
    """Every ``--agent-env`` value (a credential of the run, not a result) and every agent
    argument under a secret name, with the environment's secret variables; short values never."""
    env = {
        "SERPAPI_KEY": "serp-live-0123456789",
        "GITHUB_PAT": "ghp_live0123456789",
        "REGION": "eu",  # handed, but too short to mask safely
        "OPENAI_API_KEY": "sk-openai-1234567890",  # not handed: secret by its name
        "HOME": "/root/very-long-home-path",  # neither
    }
    args = {
        "api_key": "sk-live-from-agent-arg",
        "authToken": "tok-live-0123456789",
        "nested": {"password": "hunter2hunter2"},
        "token": "abc",
        "model": "claude-sonnet-4-5",
        "max_tokens": "100000000",
    }
    found = run_secrets(["SERPAPI_KEY", "GITHUB_PAT", "REGION", "NOT_SET"], args, env)
    assert found == {
        "serp-live-0123456789", "ghp_live0123456789", "sk-openai-1234567890",
        "sk-live-from-agent-arg", "tok-live-0123456789", "hunter2hunter2",
    }  # fmt: skip
    pattern = environment_secrets(found)
    assert redact({"env": dict(env), "args": args}, pattern)["env"]["GITHUB_PAT"] == MASK
    assert (
        redact_text("model claude-sonnet-4-5, 100000000 tokens", pattern) == "model claude-sonnet-4-5, 100000000 tokens"
    )
