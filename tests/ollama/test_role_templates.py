"""The role's templates and derived defaults, rendered by Ansible itself and parsed back.

A playbook on localhost loads the role's defaults and vars, pretends to be a Mac or a Debian
host (play vars override ``ansible_facts``), renders the three templates with
ansible.builtin.template and writes the derived variables out as JSON.
"""

from __future__ import annotations

import json
import plistlib
import re
from pathlib import Path
from typing import Any

import pytest

ROLE = Path(__file__).resolve().parents[2] / "roles" / "ollama"
MAC = {"os_family": "Darwin", "user_dir": "/Users/alice", "architecture": "arm64"}
DEBIAN = {"os_family": "Debian", "user_dir": "/root", "architecture": "x86_64"}
DERIVED = [
    "ollama_binary",
    "ollama_models_dir",
    "ollama_api_url",
    "ollama_linux_archive_url",
    "ollama_launchd_plist",
    "ollama_launchd_log_file",
    "ollama_service_environment",
]


@pytest.fixture
def render(tmp_path: Path, run_playbook):
    def run(facts: dict[str, str], **overrides: Any) -> dict[str, Any]:
        out = tmp_path / "out"
        out.mkdir(exist_ok=True)
        templates = ["ollama.plist.j2", "override.conf.j2", "ollama.service.j2"]
        tasks: list[dict[str, Any]] = [
            {
                "name": f"Render {name}",
                "ansible.builtin.template": {
                    "src": str(ROLE / "templates" / name),
                    "dest": str(out / name.removesuffix(".j2")),
                    "mode": "0644",
                },
            }
            for name in templates
        ]
        derived = "{{ {" + ", ".join(f"'{v}': {v}" for v in DERIVED) + "} | to_json }}"
        tasks.append(
            {
                "name": "Write the derived variables",
                "ansible.builtin.copy": {
                    "content": derived,
                    "dest": str(out / "derived.json"),
                    "mode": "0644",
                },
            }
        )
        playbook = [
            {
                "hosts": "localhost",
                "gather_facts": False,
                "vars_files": [
                    str(ROLE / "defaults" / "main.yml"),
                    str(ROLE / "vars" / "main.yml"),
                ],
                "vars": {"ansible_facts": facts},
                "tasks": tasks,
            }
        ]
        rc, _, output = run_playbook(playbook, extra_vars=overrides or None)
        assert rc == 0, output
        return {
            "derived": json.loads((out / "derived.json").read_text()),
            "plist": plistlib.loads((out / "ollama.plist").read_bytes()),
            "dropin": (out / "override.conf").read_text(),
            "unit": (out / "ollama.service").read_text(),
        }

    return run


def test_mac_defaults(render):
    rendered = render(MAC)
    derived = rendered["derived"]
    assert derived["ollama_binary"] == "/opt/homebrew/bin/ollama"
    assert derived["ollama_models_dir"] == "/Users/alice/.ollama/models"
    assert derived["ollama_api_url"] == "http://127.0.0.1:11434"
    assert derived["ollama_launchd_plist"] == (
        "/Users/alice/Library/LaunchAgents/com.ollama.serve.plist"
    )
    assert rendered["plist"] == {
        "Label": "com.ollama.serve",
        "ProgramArguments": ["/opt/homebrew/bin/ollama", "serve"],
        "EnvironmentVariables": {
            "OLLAMA_HOST": "127.0.0.1:11434",
            "OLLAMA_MODELS": "/Users/alice/.ollama/models",
        },
        "RunAtLoad": True,
        "KeepAlive": True,
        # Not throttled as a background job would be.
        "ProcessType": "Interactive",
        "StandardOutPath": "/Users/alice/Library/Logs/ollama.log",
        "StandardErrorPath": "/Users/alice/Library/Logs/ollama.log",
    }


TRICKY = "a & <b> \"c\" 'd' 100% \\e 日本語"


def test_mac_plist_with_extra_environment_and_lan_listener(render):
    rendered = render(
        MAC,
        ollama_host="0.0.0.0:11500",
        ollama_environment={"OLLAMA_KEEP_ALIVE": "30m", "ODD_VALUE": TRICKY},
        ollama_launchd_label="jp.example.ollama",
        ollama_homebrew_prefix="/usr/local",
    )
    plist = rendered["plist"]
    assert plist["Label"] == "jp.example.ollama"
    assert plist["ProgramArguments"] == ["/usr/local/bin/ollama", "serve"]
    assert plist["EnvironmentVariables"] == {
        "OLLAMA_HOST": "0.0.0.0:11500",
        "OLLAMA_MODELS": "/Users/alice/.ollama/models",
        "OLLAMA_KEEP_ALIVE": "30m",
        "ODD_VALUE": TRICKY,
    }
    assert rendered["derived"]["ollama_api_url"] == "http://127.0.0.1:11500"
    assert rendered["derived"]["ollama_launchd_plist"] == (
        "/Users/alice/Library/LaunchAgents/jp.example.ollama.plist"
    )


def systemd_environment(dropin: str) -> dict[str, str]:
    """Environment= lines of a drop-in, unquoted and un-escaped the way systemd reads them."""
    values = {}
    for line in dropin.splitlines():
        match = re.fullmatch(r'Environment="((?:[^"\\]|\\.)*)"', line)
        if match:
            text = re.sub(r"\\(.)", r"\1", match.group(1)).replace("%%", "%")
            name, _, value = text.partition("=")
            values[name] = value
    return values


def directives(dropin: str) -> dict[str, list[str]]:
    """Every Name=value line of a drop-in but Environment=, as systemd lists repeated ones."""
    found: dict[str, list[str]] = {}
    for line in dropin.splitlines():
        name, equals, value = line.partition("=")
        if equals and not line.startswith("#") and name != "Environment":
            found.setdefault(name, []).append(value)
    return found


def test_linux_sandbox_opens_the_gpu_devices_it_is_given_and_a_home_models_dir(render):
    rendered = render(DEBIAN, ollama_devices=["/dev/nvidiactl", "/dev/nvidia0"],
                      ollama_models_dir="/home/ai/models")
    sandbox = directives(rendered["dropin"])
    assert sandbox["DevicePolicy"] == ["closed"]
    assert sandbox["DeviceAllow"] == ["/dev/nvidiactl rw", "/dev/nvidia0 rw"]
    assert "PrivateDevices" not in sandbox
    assert sandbox["ProtectHome"] == ["read-only"]
    assert sandbox["ReadWritePaths"] == ["/home/ai/models -/usr/share/ollama"]


def test_linux_sandbox_opens_the_amd_devices_of_the_documented_example(render):
    # systemd's DeviceAllow= ignores a path that is not a device node (a directory such as
    # /dev/dri): the ROCm example of the defaults names the DRM devices by their group.
    example = re.search(r"^#   ollama_devices: \[(.*)\] +# AMD",
                        (ROLE / "defaults" / "main.yml").read_text(), re.MULTILINE)
    assert example, "the defaults lost their AMD example"
    devices = [device.strip() for device in example.group(1).split(",")]
    assert devices == ["/dev/kfd", "char-drm"]
    sandbox = directives(render(DEBIAN, ollama_devices=devices)["dropin"])
    assert sandbox["DevicePolicy"] == ["closed"]
    assert sandbox["DeviceAllow"] == ["/dev/kfd rw", "char-drm rw"]
    assert "PrivateDevices" not in sandbox


def test_linux_defaults(render):
    rendered = render(DEBIAN)
    derived = rendered["derived"]
    assert derived["ollama_binary"] == "/usr/local/bin/ollama"
    assert derived["ollama_models_dir"] == "/usr/share/ollama/.ollama/models"
    assert derived["ollama_linux_archive_url"] == (
        "https://ollama.com/download/ollama-linux-amd64.tar.zst"
    )
    assert systemd_environment(rendered["dropin"]) == {
        "OLLAMA_HOST": "127.0.0.1:11434",
        "OLLAMA_MODELS": "/usr/share/ollama/.ollama/models",
    }
    sandbox = directives(rendered["dropin"])
    assert sandbox["ReadWritePaths"] == ["/usr/share/ollama/.ollama/models -/usr/share/ollama"]
    assert sandbox["ProtectHome"] == ["yes"]
    assert sandbox["PrivateDevices"] == ["yes"]
    assert "DeviceAllow" not in sandbox
    unit = rendered["unit"]
    assert "ExecStart=/usr/local/bin/ollama serve\n" in unit
    assert "User=ollama\n" in unit
    assert "Group=ollama\n" in unit
    assert "WantedBy=multi-user.target\n" in unit


def test_linux_dropin_escapes_quotes_backslashes_and_percent(render):
    rendered = render(
        DEBIAN,
        ollama_host="0.0.0.0:11434",
        ollama_models_dir="/srv/ollama/models",
        ollama_environment={"OLLAMA_KEEP_ALIVE": "-1", "ODD_VALUE": TRICKY},
    )
    assert 'Environment="ODD_VALUE=a & <b> \\"c\\" \'d\' 100%% \\\\e 日本語"' in (
        rendered["dropin"].splitlines()
    )
    assert systemd_environment(rendered["dropin"]) == {
        "OLLAMA_HOST": "0.0.0.0:11434",
        "OLLAMA_KEEP_ALIVE": "-1",
        "OLLAMA_MODELS": "/srv/ollama/models",
        "ODD_VALUE": TRICKY,
    }


def test_api_url_follows_the_listen_address(run_playbook):
    hosts = {
        "127.0.0.1:11434": "http://127.0.0.1:11434",
        "0.0.0.0:11434": "http://127.0.0.1:11434",
        "[::]:11434": "http://127.0.0.1:11434",
        # A listener bound to one LAN address is reached there, not on loopback.
        "192.0.2.10:11434": "http://192.0.2.10:11434",
    }
    # One playbook for all cases: a loop with ollama_host as a task variable.
    playbook = [
        {
            "hosts": "localhost",
            "gather_facts": False,
            "vars_files": [str(ROLE / "defaults" / "main.yml")],
            "vars": {"ansible_facts": DEBIAN},
            "tasks": [
                {
                    "ansible.builtin.debug": {"var": "ollama_api_url"},
                    "vars": {"ollama_host": "{{ item }}"},
                    "loop": list(hosts),
                }
            ],
        }
    ]
    rc, results, output = run_playbook(playbook)
    assert rc == 0, output
    assert {r["item"]: r["ollama_api_url"] for r in results[0]["results"]} == hosts


def test_pinned_version_on_arm(render):
    derived = render({**DEBIAN, "architecture": "aarch64"}, ollama_version="0.13.0")["derived"]
    assert derived["ollama_linux_archive_url"] == (
        "https://github.com/ollama/ollama/releases/download/v0.13.0/ollama-linux-arm64.tar.zst"
    )
