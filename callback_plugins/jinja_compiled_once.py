# Copyright: (c) 2026, the coordinator-cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Compiles each Jinja template or expression once a run, for every process of the run."""

from __future__ import annotations

DOCUMENTATION = r"""
name: jinja_compiled_once
type: aggregate
short_description: Compile each Jinja template and expression once a run
description:
  - Ansible runs each task on each host in a worker process forked for it, and the worker
    compiles every template and conditional the task renders (Jinja parses it, generates
    Python and compiles that) into a cache that exits with the worker. The next task's
    workers compile the same role defaults, conditionals and arguments again, for every host.
  - This callback keeps the compiled code of each template and expression in a directory of
    the run's own temporary directory (mode 0700, removed when the run ends). A worker that
    meets a template another process compiled loads its code instead of compiling it; one
    that compiles a template writes its code there. On a converge that changes nothing it
    takes about a tenth of the controller's CPU time away (docs/benchmarks.md).
  - The code is kept by the template's text and everything that decides how Jinja compiles
    it (the environment's class and syntax settings, an expression's handling of undefined
    values, Ansible's backslash escaping), so a template renders as it does without it. With
    an ansible-core whose templating has no such environment, or with template debugging on,
    it does nothing.
requirements:
  - enabled in ansible.cfg (C(callbacks_enabled))
"""

import contextvars
import functools
import hashlib
import marshal
import os
from types import CodeType
from typing import Any

from ansible import constants as C
from ansible.plugins.callback import CallbackBase

try:
    import jinja2.nodes
    from ansible._internal._templating import _jinja_bits
except ImportError:  # another ansible-core than the one requirements-dev.txt pins
    _jinja_bits = None

# What the key is made of, in the templating of the ansible-core requirements-dev.txt pins.
_NEEDED = ("AnsibleEnvironment", "_TemplateCompileContext", "_TEMPLATE_OVERRIDE_FIELD_NAMES",
           "_TemplateConfig")

# The expression compile_expression is compiling: Jinja hands compile() its syntax tree only.
_EXPRESSION: contextvars.ContextVar[tuple[str, bool] | None] = contextvars.ContextVar(
    "jinja_compiled_once_expression", default=None)


class _SharedCode:
    """AnsibleEnvironment.compile, with each code object kept in ``directory`` by a digest of
    what it was compiled from."""

    def __init__(self, compile_: Any, directory: str) -> None:
        self.compile = compile_
        self.directory = directory

    def __get__(self, env: Any, owner: type | None = None) -> Any:
        # A method of the environment's class: bound to the environment it is called on.
        return self if env is None else functools.partial(self, env)

    def key(self, env: Any, source: object, name: str | None, filename: str | None,
            defer_init: bool) -> str | None:
        if isinstance(source, str):
            what: tuple[object, ...] = ("template", str(source))
        elif isinstance(source, jinja2.nodes.Template) and (expression := _EXPRESSION.get()):
            what = ("expression", *expression)
        else:
            return None
        escaping = _jinja_bits._TemplateCompileContext.current(optional=True)
        settings = (
            type(env).__module__, type(env).__qualname__, env.optimized, env.is_async,
            tuple(getattr(env, field) for field in _jinja_bits._TEMPLATE_OVERRIDE_FIELD_NAMES),
            escaping.escape_backslashes if escaping else None,
            _jinja_bits._TemplateConfig.allow_embedded_templates)
        kept_by = repr((what, name, filename, defer_init, settings))
        return hashlib.sha256(kept_by.encode()).hexdigest()

    def __call__(self, env: Any, source: Any, name: str | None = None,
                 filename: str | None = None, raw: bool = False,
                 defer_init: bool = False) -> CodeType | str:
        key = None if raw or getattr(env, "_debuggable_template_source", True) else self.key(
            env, source, name, filename, defer_init)
        if key is None:
            return self.compile(env, source, name, filename, raw, defer_init)
        path = os.path.join(self.directory, key)
        try:
            with open(path, "rb") as kept:
                return marshal.loads(kept.read())
        except (OSError, EOFError, ValueError, TypeError):
            pass
        code = self.compile(env, source, name, filename, raw, defer_init)
        # Written whole under another name, then renamed: a reader sees all of it or nothing.
        partial = f"{path}.{os.getpid()}"
        try:
            with open(partial, "wb") as kept:
                kept.write(marshal.dumps(code))
            os.replace(partial, path)
        except (OSError, ValueError):
            pass
        return code


def _compile_expression(compile_expression: Any) -> Any:
    def compile_kept(env: Any, source: str, undefined_to_none: bool = True) -> Any:
        token = _EXPRESSION.set((str(source), undefined_to_none))
        try:
            return compile_expression(env, source, undefined_to_none)
        finally:
            _EXPRESSION.reset(token)
    return compile_kept


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "jinja_compiled_once"
    CALLBACK_NEEDS_ENABLED = True

    def v2_playbook_on_start(self, playbook: object) -> None:
        if not all(hasattr(_jinja_bits, name) for name in _NEEDED):
            return
        env = _jinja_bits.AnsibleEnvironment
        if isinstance(env.compile, _SharedCode):
            return
        directory = os.path.join(C.DEFAULT_LOCAL_TMP, "jinja-code")
        os.makedirs(directory, mode=0o700, exist_ok=True)
        env.compile = _SharedCode(env.compile, directory)
        env.compile_expression = _compile_expression(env.compile_expression)
