"""docs/coordinator.md's configuration table held to files/coordinator/config.py: every
setting is documented, with the default the program has (DEFAULT), so a default changed in
config.py fails here until the table says the same."""

from __future__ import annotations

import dataclasses
import re

import pytest

from coordinator import config
from coordinator.config import DEFAULT, load_config
from lab.drive import REPO

# A row of the table under "## Configuration": | `VARIABLE` | default | meaning |
ROW = re.compile(r"^\| `([A-Z][A-Z0-9_]*)` \| ([^|]+) \|", re.M)
REQUIRED = {"PG_DSN": "host=db dbname=c", "REDIS_HOST": "r"}


def documented() -> dict[str, str]:
    """variable -> its default as the table writes it (`15` s, none, required, ...)."""
    text = (REPO / "docs" / "coordinator.md").read_text()
    section = text.split("\n## Configuration", 1)[1].split("\n## ", 1)[0]
    return {name: default.strip() for name, default in ROW.findall(section)}


def field_of(variable: str) -> str:
    """The Config field a variable sets: COORDINATOR_HEARTBEAT_TTL -> heartbeat_ttl."""
    return variable.removeprefix("COORDINATOR_").lower()


def doc_value(text: str) -> object:
    """A documented default as a value: `15` s -> '15', none -> None."""
    if text == "none":
        return None
    match = re.fullmatch(r"`([^`]*)`(?: \w+)?", text)
    assert match, f"a default is written `value` [unit], none or required, not {text!r}"
    return match.group(1)


def test_every_setting_of_config_py_is_documented_and_no_other():
    fields = {f.name for f in dataclasses.fields(config.Config)}
    assert {field_of(variable) for variable in documented()} == fields


@pytest.mark.parametrize("variable", sorted(documented()))
def test_the_documented_default_is_the_programs(variable):
    written = documented()[variable]
    if variable in REQUIRED:
        assert written == "required"
        with pytest.raises(config.ConfigError, match=variable):
            load_config({k: v for k, v in REQUIRED.items() if k != variable})
        return
    default = getattr(DEFAULT, field_of(variable))
    # load_config reads the variable: a value set there is taken, or refused naming it.
    try:
        taken = getattr(load_config(REQUIRED | {variable: "probe-value-9"}), field_of(variable))
    except config.ConfigError as error:
        assert variable in str(error)
    else:
        assert taken != default, f"config.py does not read {variable}"
    # What load_config gives when the variable is unset is the default too.
    assert getattr(load_config(REQUIRED), field_of(variable)) == default
    value = doc_value(written)
    if default is None or value is None:
        assert value == default, f"{variable}: the doc says {written}, config.py {default!r}"
    elif isinstance(default, bool):
        assert value == str(default).lower(), f"{variable}: {written} vs {default!r}"
    elif isinstance(default, (int, float)):
        assert float(value) == default, f"{variable}: the doc says {written}, config.py {default!r}"
    else:
        assert value == default, f"{variable}: the doc says {written}, config.py {default!r}"


def test_the_heartbeat_ttl_the_doc_states_is_the_programs():
    # The example: the TTL stated in the table and used in the prose (TTL/3).
    assert doc_value(documented()["COORDINATOR_HEARTBEAT_TTL"]) == f"{DEFAULT.heartbeat_ttl:g}"
    assert DEFAULT.heartbeat_interval == DEFAULT.heartbeat_ttl / 3
