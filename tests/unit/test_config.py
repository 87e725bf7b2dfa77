"""Configuration: every problem named with its variable, or its file, line and key, all at once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from approvals import errors
from bot import config

REPO = Path(__file__).resolve().parents[2]

# DESIGN.md's example, verbatim: a user's file like this one must keep working.
CONTRACT_YAML = """\
slack:
  reviewer_channel: C0REVIEWS
agents:
  sales-bot:
    token_env: SALES_BOT_TOKEN             # bearer token the agent presents
    callback_secret_env: SALES_BOT_SIGNING # key for Countersign-Signature on callbacks
    callback_hosts: ["127.0.0.1:8088", "agent.internal"]
roles:
  approvers: {users: [U0ANA, U0BEN], usergroups: [S0APPROVERS]}
  finance:   {usergroups: [S0FINANCE]}
rules:                                     # first match wins
  - tool: "transfer_*"
    require: finance
  - tool: "*"                              # default: a human always decides
    require: approvers
"""

SALES_TOKEN = "sales-bot-token-0123456789"
# Every variable Settings reads, plus the agents' ones these tests use.
VARIABLES = (
    "SLACK_BOT_TOKEN",
    "SLACK_SIGNING_SECRET",
    "SLACK_APP_TOKEN",
    "SLACK_API_URL",
    "DATABASE_URL",
    "COUNTERSIGN_CONFIG",
    "HOST",
    "PORT",
    "COUNTERSIGN_DATA_DIR",
    "COUNTERSIGN_DELIVERY_BUDGET",
    "COUNTERSIGN_DELIVERY_MAX_DELAY",
    "LOG_LEVEL",
    "SALES_BOT_TOKEN",
    "SALES_BOT_SIGNING",
    "OPS_BOT_TOKEN",
)
SALES_SECRET = "sales-bot-callback-secret"


@pytest.fixture(autouse=True)
def _clean_process_env(monkeypatch: pytest.MonkeyPatch) -> None:
    # load(env) also reads the process environment (see the xfail below): keep it out.
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)


def write(tmp_path: Path, text: str, name: str = "countersign.yml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def env_for(path: Path, **changes: str | None) -> dict[str, str]:
    env = {
        "SLACK_BOT_TOKEN": "xoxb-test-token",
        "SLACK_SIGNING_SECRET": "test-signing-secret",
        "COUNTERSIGN_CONFIG": str(path),
        "SALES_BOT_TOKEN": SALES_TOKEN,
        "SALES_BOT_SIGNING": SALES_SECRET,
    }
    for key, value in changes.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def line_of(text: str, needle: str) -> int:
    """1-based line of the only line containing ``needle``."""
    lines = [i for i, line in enumerate(text.splitlines(), start=1) if needle in line]
    assert len(lines) == 1, (needle, lines)
    return lines[0]


def problems_of(env: dict[str, str]) -> list[str]:
    with pytest.raises(errors.ConfigError) as exc:
        config.load(env)
    assert exc.value.problems, "a ConfigError must carry at least one problem"
    assert str(exc.value) == "\n".join(exc.value.problems)
    return exc.value.problems


def only(problems: list[str], needle: str) -> str:
    found = [p for p in problems if needle in p]
    assert len(found) == 1, (needle, problems)
    return found[0]


def test_contract_file_loads(tmp_path: Path) -> None:
    path = write(tmp_path, CONTRACT_YAML)
    cfg = config.load(env_for(path))
    assert cfg.settings.slack_bot_token.get_secret_value() == "xoxb-test-token"
    assert cfg.settings.slack_signing_secret.get_secret_value() == "test-signing-secret"
    assert cfg.settings.config_path == path
    assert cfg.policy.slack.reviewer_channel == "C0REVIEWS"
    assert cfg.policy.agents["sales-bot"].callback_hosts == ("127.0.0.1:8088", "agent.internal")
    assert cfg.policy.roles["approvers"].users == ("U0ANA", "U0BEN")
    assert cfg.policy.match("transfer_money").rule.require == "finance"
    assert cfg.policy.match("anything_else").rule.require == "approvers"
    assert cfg.agents == (
        config.AgentCredentials(name="sales-bot", token=SALES_TOKEN, callback_secret=SALES_SECRET),
    )


def test_settings_defaults(tmp_path: Path) -> None:
    cfg = config.load(env_for(write(tmp_path, CONTRACT_YAML)))
    assert cfg.settings.slack_api_url == "https://slack.com/api/"
    assert cfg.settings.database_url is None
    assert cfg.settings.port == 3000


def test_unknown_key_named_with_file_and_line(tmp_path: Path) -> None:
    text = CONTRACT_YAML.replace("    require: finance", "    requir: finance")
    path = write(tmp_path, text)
    problems = problems_of(env_for(path))
    line = line_of(text, "requir: finance")
    extra = only(problems, "rules.0.requir:")
    assert extra.startswith(f"{path}:{line}: rules.0.requir:")
    assert "Extra inputs" in extra
    # and the key it was meant to be is reported missing, pointing at that rule
    missing = only(problems, "rules.0.require:")
    assert missing.startswith(f"{path}:{line_of(text, 'transfer_*')}: rules.0.require:")


def test_undefined_role_named_with_file_and_line(tmp_path: Path) -> None:
    text = CONTRACT_YAML.replace("    require: finance", "    require: finanse")
    path = write(tmp_path, text)
    problem = only(problems_of(env_for(path)), "rules.0.require")
    assert problem.startswith(f"{path}:{line_of(text, 'finanse')}: rules.0.require:")
    assert "'finanse'" in problem
    assert "not defined" in problem


def test_last_rule_not_catch_all_named_with_file_and_line(tmp_path: Path) -> None:
    text = CONTRACT_YAML.replace('  - tool: "*" ', '  - tool: "send_*" ')
    path = write(tmp_path, text)
    problem = only(problems_of(env_for(path)), "rules.1.tool")
    assert problem.startswith(f"{path}:{line_of(text, 'send_*')}: rules.1.tool:")
    assert "last rule" in problem


def test_bad_channel_id_named_with_file_and_line(tmp_path: Path) -> None:
    text = CONTRACT_YAML.replace("C0REVIEWS", "#reviews")
    path = write(tmp_path, text)
    problem = only(problems_of(env_for(path)), "slack.reviewer_channel")
    assert problem.startswith(f"{path}:{line_of(text, '#reviews')}: slack.reviewer_channel:")


def deny_reasons_yaml(count: int) -> str:
    reasons = "".join(f"  - Reason {i}\n" for i in range(count))
    return CONTRACT_YAML + "deny_reasons:\n" + reasons


def test_more_deny_reasons_than_the_modal_offers_named_with_file_and_line(
    tmp_path: Path,
) -> None:
    # Slack's static_select holds 100 options: a 101st reason could never be chosen
    assert config.load(env_for(write(tmp_path, deny_reasons_yaml(100)))).policy.deny_reasons
    text = deny_reasons_yaml(101)
    path = write(tmp_path, text)
    problem = only(problems_of(env_for(path)), "deny_reasons")
    # the line where the key's value starts, as for every other key
    assert problem.startswith(f"{path}:{line_of(text, '- Reason 0')}: deny_reasons:")
    assert "at most 100 items" in problem


@pytest.mark.parametrize(
    ("broken", "bad_line"),
    [
        ('  - tool: "*\n', '  - tool: "*'),  # unclosed quote: reported where the stream ends
        ("roles:\n\tfinance: {}\n", "\tfinance"),
        ("agents: [1, 2\nroles: {}\n", "roles: {}"),
    ],
    ids=["unclosed-quote", "tab", "unclosed-flow"],
)
def test_yaml_syntax_error_with_line(tmp_path: Path, broken: str, bad_line: str) -> None:
    text = "slack:\n  reviewer_channel: C0REVIEWS\nrules:\n" + broken
    path = write(tmp_path, text)
    problems = problems_of(env_for(path))
    assert len(problems) == 1
    problem = problems[0]
    assert problem.startswith(f"{path}:")
    assert "invalid YAML" in problem
    reported = int(problem.removeprefix(f"{path}:").split(":", 1)[0])
    expected = line_of(text, bad_line)
    assert expected <= reported <= expected + 1


def test_not_a_mapping(tmp_path: Path) -> None:
    path = write(tmp_path, "- just\n- a list\n")
    assert only(problems_of(env_for(path)), str(path)).endswith("must be a mapping of keys")


def test_missing_file_named(tmp_path: Path) -> None:
    path = tmp_path / "nope.yml"
    problem = only(problems_of(env_for(path)), str(path))
    assert "cannot read" in problem


@pytest.mark.parametrize("missing", ["SLACK_BOT_TOKEN", "SLACK_SIGNING_SECRET"])
def test_missing_slack_secret_named(tmp_path: Path, missing: str) -> None:
    path = write(tmp_path, CONTRACT_YAML)
    problems = problems_of(env_for(path, **{missing: None}))
    assert problems == [f"{missing}: not set"]


def test_both_slack_secrets_missing(tmp_path: Path) -> None:
    path = write(tmp_path, CONTRACT_YAML)
    problems = problems_of(env_for(path, SLACK_BOT_TOKEN=None, SLACK_SIGNING_SECRET=None))
    assert sorted(problems) == ["SLACK_BOT_TOKEN: not set", "SLACK_SIGNING_SECRET: not set"]


def test_agent_token_env_not_set_named(tmp_path: Path) -> None:
    path = write(tmp_path, CONTRACT_YAML)
    problem = only(problems_of(env_for(path, SALES_BOT_TOKEN=None)), "SALES_BOT_TOKEN")
    where = f"{path}:{line_of(CONTRACT_YAML, 'token_env:')}: agents.sales-bot.token_env"
    assert problem == f"SALES_BOT_TOKEN: not set (named by {where})"


def test_agent_token_empty_is_not_set(tmp_path: Path) -> None:
    path = write(tmp_path, CONTRACT_YAML)
    assert "not set" in only(problems_of(env_for(path, SALES_BOT_TOKEN="")), "SALES_BOT_TOKEN")


def test_agent_callback_secret_not_set_named(tmp_path: Path) -> None:
    path = write(tmp_path, CONTRACT_YAML)
    problem = only(problems_of(env_for(path, SALES_BOT_SIGNING=None)), "SALES_BOT_SIGNING")
    assert "not set" in problem
    assert f"{path}:{line_of(CONTRACT_YAML, 'callback_secret_env')}" in problem


def test_agent_token_too_short(tmp_path: Path) -> None:
    path = write(tmp_path, CONTRACT_YAML)
    problem = only(problems_of(env_for(path, SALES_BOT_TOKEN="s3cr3t-15chars!")), "SALES_BOT_TOKEN")
    assert "too short" in problem
    assert "s3cr3t" not in problem  # the secret itself is not echoed


def test_two_agents_with_one_token(tmp_path: Path) -> None:
    text = CONTRACT_YAML.replace("roles:", "  ops-bot:\n    token_env: OPS_BOT_TOKEN\nroles:", 1)
    path = write(tmp_path, text)
    problem = only(problems_of(env_for(path, OPS_BOT_TOKEN=SALES_TOKEN)), "OPS_BOT_TOKEN")
    assert "same token" in problem
    assert "'sales-bot'" in problem
    assert SALES_TOKEN not in problem


def test_all_problems_reported_together(tmp_path: Path) -> None:
    text = CONTRACT_YAML.replace("C0REVIEWS", "#reviews").replace(
        "    require: finance", "    requir: finance"
    )
    path = write(tmp_path, text)
    problems = problems_of(env_for(path, SLACK_BOT_TOKEN=None, SLACK_SIGNING_SECRET=None))
    assert "SLACK_BOT_TOKEN: not set" in problems
    assert "SLACK_SIGNING_SECRET: not set" in problems
    assert only(problems, "slack.reviewer_channel").startswith(f"{path}:")
    assert only(problems, "rules.0.requir:").startswith(f"{path}:")


def test_settings_and_cross_field_problems_together(tmp_path: Path) -> None:
    text = CONTRACT_YAML.replace("    require: finance", "    require: ghost")
    path = write(tmp_path, text)
    problems = problems_of(env_for(path, SLACK_BOT_TOKEN=None))
    assert "SLACK_BOT_TOKEN: not set" in problems
    assert "'ghost'" in only(problems, "rules.0.require")


def test_several_policy_problems_together(tmp_path: Path) -> None:
    text = CONTRACT_YAML.replace("    require: finance", "    require: ghost").replace(
        '  - tool: "*" ', '  - tool: "send_*" '
    )
    path = write(tmp_path, text)
    problems = problems_of(env_for(path))
    assert only(problems, "rules.0.require")
    assert only(problems, "rules.1.tool")


def test_slack_and_agent_variables_missing_reported_together(tmp_path: Path) -> None:
    path = write(tmp_path, CONTRACT_YAML)
    problems = problems_of(env_for(path, SLACK_BOT_TOKEN=None, SALES_BOT_TOKEN=None))
    assert "SLACK_BOT_TOKEN: not set" in problems
    assert any(p.startswith("SALES_BOT_TOKEN: not set") for p in problems), problems


def test_explicit_env_is_the_only_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-from-the-process-environment")
    path = write(tmp_path, CONTRACT_YAML)
    problems = problems_of(env_for(path, SLACK_BOT_TOKEN=None))
    assert "SLACK_BOT_TOKEN: not set" in problems


def test_duplicate_key_is_a_problem(tmp_path: Path) -> None:
    text = CONTRACT_YAML.replace(
        "  finance:   {usergroups: [S0FINANCE]}\n",
        "  finance:   {usergroups: [S0FINANCE]}\n  finance:   {users: [U0MALLORY]}\n",
    )
    path = write(tmp_path, text)
    problems = problems_of(env_for(path))
    assert any("finance" in p and "duplicate" in p.lower() for p in problems), problems


def test_check_command_reports_problems_and_exits_2(tmp_path: Path) -> None:
    text = CONTRACT_YAML.replace("    require: finance", "    requir: finance")
    path = write(tmp_path, text)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp_path),
        "COUNTERSIGN_CONFIG": str(path),
        "SLACK_SIGNING_SECRET": "test-signing-secret",
        "SALES_BOT_TOKEN": SALES_TOKEN,
        "SALES_BOT_SIGNING": SALES_SECRET,
        "COUNTERSIGN_DATA_DIR": str(tmp_path / "data"),
    }
    result = subprocess.run(
        [sys.executable, "-m", "bot.cli", "check"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    assert "Traceback" not in result.stdout
    assert "SLACK_BOT_TOKEN: not set" in result.stderr
    assert f"{path}:{line_of(text, 'requir: finance')}: rules.0.requir" in result.stderr
    assert "configuration OK" not in result.stdout
    assert not (tmp_path / "data").exists()  # failed fast: no database was started


def test_an_invalid_tool_schema_is_named_with_file_line_and_key(tmp_path: Path) -> None:
    text = CONTRACT_YAML + (
        "tools:\n"
        '  "transfer_*":\n'
        "    arguments: {type: object, properties: {amount: {type: money}}}\n"
    )
    path = write(tmp_path, text)
    problem = only(problems_of(env_for(path)), "tools.transfer_*.arguments")
    assert problem.startswith(f"{path}:{line_of(text, 'type: money')}: tools.transfer_*.arguments")
    assert "not a valid JSON Schema" in problem


def test_a_valid_tool_schema_loads_and_is_checked(tmp_path: Path) -> None:
    text = CONTRACT_YAML + (
        "tools:\n"
        '  "transfer_*":\n'
        "    arguments: {type: object, required: [amount], properties: {amount: {type: number}}}\n"
    )
    cfg = config.load(env_for(write(tmp_path, text)))
    [problem] = cfg.policy.argument_problems("transfer_money", {"amount": "1"})
    assert problem.field == "tool.arguments.amount"


def test_a_tool_schema_with_a_remote_ref_is_named_with_file_line_and_key(tmp_path: Path) -> None:
    text = CONTRACT_YAML + (
        'tools:\n  "transfer_*":\n    arguments: {$ref: "https://schemas.example/transfer.json"}\n'
    )
    path = write(tmp_path, text)
    problem = only(problems_of(env_for(path)), "tools.transfer_*.arguments")
    assert problem.startswith(f"{path}:{line_of(text, 'schemas.example')}: ")
    assert "'https://schemas.example/transfer.json' does not resolve" in problem


def test_environment_problems_are_settings_errors(tmp_path: Path) -> None:
    path = write(tmp_path, CONTRACT_YAML)
    with pytest.raises(errors.SettingsError) as exc:
        config.load(env_for(path, SLACK_BOT_TOKEN=None, SALES_BOT_TOKEN=None))
    assert not isinstance(exc.value, errors.PolicyError)
    assert exc.value.problems[0] == "SLACK_BOT_TOKEN: not set"


def test_policy_file_problems_are_policy_errors(tmp_path: Path) -> None:
    path = write(tmp_path, CONTRACT_YAML.replace("C0REVIEWS", "#reviews"))
    with pytest.raises(errors.PolicyError):
        config.load(env_for(path))


def test_problems_of_both_are_one_config_error_environment_first(tmp_path: Path) -> None:
    path = write(tmp_path, CONTRACT_YAML.replace("C0REVIEWS", "#reviews"))
    with pytest.raises(errors.ConfigError) as exc:
        config.load(env_for(path, SLACK_BOT_TOKEN=None))
    assert not isinstance(exc.value, errors.PolicyError | errors.SettingsError)
    assert exc.value.problems[0] == "SLACK_BOT_TOKEN: not set"
    assert exc.value.problems[1].startswith(f"{path}:2: slack.reviewer_channel:")


def test_the_database_commands_need_neither_slack_nor_the_policy_file(tmp_path: Path) -> None:
    settings = config.load_common(
        {"DATABASE_URL": "postgresql://db.internal/countersign", "COUNTERSIGN_DATA_DIR": "d"}
    )
    assert settings.database_url == "postgresql://db.internal/countersign"
    assert settings.data_dir == Path("d")
    assert settings.log_level == "INFO"
    assert config.load_common({}).database_url is None  # an embedded PostgreSQL, then


@pytest.mark.parametrize("spelling", ["debug", "Debug", "DEBUG"])
def test_log_level_in_any_case(spelling: str) -> None:
    assert config.load_common({"LOG_LEVEL": spelling}).log_level == "DEBUG"


def test_an_unknown_log_level_is_named() -> None:
    with pytest.raises(errors.SettingsError) as exc:
        config.load_common({"LOG_LEVEL": "loud"})
    [problem] = exc.value.problems
    assert problem.startswith("LOG_LEVEL: ")


def test_reread_keeps_the_settings_and_reads_the_file_again(tmp_path: Path) -> None:
    path = write(tmp_path, CONTRACT_YAML)
    cfg = config.load(env_for(path))
    write(tmp_path, CONTRACT_YAML.replace("    require: finance", "    require: approvers"))
    again = config.reread(cfg.settings, env_for(path), path)
    assert again.settings is cfg.settings
    assert again.policy.match("transfer_money").rule.require == "approvers"
    assert again.agents == cfg.agents


def test_reread_refuses_a_file_naming_an_agent_without_a_token(tmp_path: Path) -> None:
    path = write(tmp_path, CONTRACT_YAML)
    cfg = config.load(env_for(path))
    text = CONTRACT_YAML.replace("roles:", "  ops-bot:\n    token_env: OPS_BOT_TOKEN\nroles:", 1)
    write(tmp_path, text)
    with pytest.raises(errors.SettingsError) as exc:
        config.reread(cfg.settings, env_for(path), path)
    assert exc.value.problems[0].startswith("OPS_BOT_TOKEN: not set (named by ")


def test_relay_concurrency_is_a_setting_within_bounds(tmp_path: Path) -> None:
    path = write(tmp_path, CONTRACT_YAML)
    assert config.load(env_for(path)).settings.relay_concurrency == 20
    many = config.load(env_for(path, COUNTERSIGN_RELAY_CONCURRENCY="64"))
    assert many.settings.relay_concurrency == 64
    for wrong in ("0", "-3", "1001", "many", "2.5"):
        with pytest.raises(errors.SettingsError) as exc:
            config.load(env_for(path, COUNTERSIGN_RELAY_CONCURRENCY=wrong))
        assert exc.value.problems[0].startswith("COUNTERSIGN_RELAY_CONCURRENCY: "), wrong
