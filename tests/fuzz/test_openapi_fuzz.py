"""Property-based fuzzing of the Coordinator driven by its own OpenAPI schema (hypothesis,
pinned in requirements-dev.txt): every operation, with bodies and parameters that follow the
schema, bend it, or ignore it. The bar: no 5xx, every 4xx carries a useful {"error"}, the
token is enforced everywhere but /health (and the status page's own login), and the server
stays up."""

from __future__ import annotations

import json
import uuid
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fuzz.conftest import assert_useful_error
from tests.workers.conftest import Coordinator

OPEN = {"/health"}
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
    | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner,
                                                                max_size=4),
    max_leaves=10,
)


def load_schema(url: str) -> dict[str, Any]:
    response = httpx.get(f"{url}/openapi.json", timeout=10,
                         headers={"Authorization": "Bearer fuzz-token-0123456789"})
    assert response.status_code == 200, response.text
    return response.json()


def from_schema(schema: dict[str, Any], root: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Values that follow a JSON schema (the subset FastAPI emits)."""
    if "$ref" in schema:
        target: Any = root
        for part in schema["$ref"].lstrip("#/").split("/"):
            target = target[part]
        return from_schema(target, root)
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return st.one_of([from_schema(s, root) for s in schema[key]])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    if "const" in schema:
        return st.just(schema["const"])
    kind = schema.get("type")
    if kind == "string":
        if schema.get("format") == "uuid":
            return st.uuids().map(str)
        return st.text(min_size=schema.get("minLength", 0), max_size=60)
    if kind == "integer":
        return st.integers(-2**40, 2**40)
    if kind == "number":
        return st.floats(-1e12, 1e12, allow_nan=False)
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    if kind == "array":
        return st.lists(from_schema(schema.get("items", {}), root), max_size=4)
    if kind == "object" or "properties" in schema:
        props = schema.get("properties", {})
        required = set(schema.get("required", []))
        return st.fixed_dictionaries(
            {k: from_schema(v, root) for k, v in props.items() if k in required},
            optional={k: from_schema(v, root) for k, v in props.items()
                      if k not in required})
    return JSON


def body_strategy(op: dict[str, Any], root: dict[str, Any]) -> st.SearchStrategy[Any]:
    """A body that follows the schema, arbitrary JSON, or bytes that are not JSON at all."""
    content = op.get("requestBody", {}).get("content", {}).get("application/json")
    conforming = from_schema(content["schema"], root) if content else st.none()
    return st.one_of(conforming.map(json.dumps), conforming.map(json.dumps),
                     JSON.map(json.dumps), st.binary(max_size=200), st.just(""))


def param_strategy(param: dict[str, Any], root: dict[str, Any]) -> st.SearchStrategy[str]:
    if param["name"] == "wait":
        # Out-of-range and junk waits, or short valid ones: a valid wait on a task that
        # never finishes would hold the example for up to 60 s.
        return st.one_of(st.floats(0, 0.5).map(str), st.floats(60.001, 1e15).map(str),
                         st.floats(max_value=-0.001).map(str), st.text(max_size=10))
    if param["name"] == "task_id":
        return st.one_of(st.uuids().map(str), st.text(max_size=80))
    return from_schema(param.get("schema", {}), root).map(str)


def operations(schema: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [(method.upper(), path, op) for path, item in schema["paths"].items()
            for method, op in item.items()]


@st.composite
def requests_for(draw: st.DrawFn, schema: dict[str, Any]) -> tuple[str, str, dict, bytes]:
    method, path, op = draw(st.sampled_from(operations(schema)))
    query: dict[str, str] = {}
    for param in op.get("parameters", []):
        value = draw(param_strategy(param, schema))
        if param["in"] == "path":
            path = path.replace(f"{{{param['name']}}}", quote(value, safe="") or "%20")
        elif param["in"] == "query" and (param.get("required") or draw(st.booleans())):
            query[param["name"]] = value
    body = draw(body_strategy(op, schema)) if method == "POST" else ""
    return method, path, query, body if isinstance(body, bytes) else body.encode()


def test_schema_lists_every_endpoint_of_the_contract(guarded: Coordinator) -> None:
    paths = set(load_schema(guarded.url)["paths"])
    assert {"/route", "/task/{task_id}", "/workers/register",
            "/workers/{worker_id}/heartbeat", "/workers", "/queues", "/health",
            "/metrics"} <= paths


def test_fuzz_every_operation(guarded: Coordinator, client: httpx.Client) -> None:
    schema = load_schema(guarded.url)
    seen: set[int] = set()

    @settings(max_examples=400, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(requests_for(schema))
    def one(request: tuple[str, str, dict, bytes]) -> None:
        method, path, query, body = request
        response = client.request(method, path, params=query, content=body,
                                  headers={"Content-Type": "application/json"})
        seen.add(response.status_code)
        assert response.status_code < 500, (method, path, query, body[:200], response.text)
        if response.status_code >= 400:
            assert_useful_error(response)

    one()
    assert guarded.process.alive(), "the Coordinator died under fuzzing"
    # The fuzzer reached both accepted and refused requests.
    assert any(code < 300 for code in seen) and any(400 <= code < 500 for code in seen), seen


@pytest.mark.parametrize("with_bad_token", [False, True])
def test_token_is_enforced_on_every_path_but_health(guarded: Coordinator,
                                                   with_bad_token: bool) -> None:
    schema = load_schema(guarded.url)
    headers = {"Authorization": "Bearer wrong-token"} if with_bad_token else {}
    checked = []
    for method, path, _op in operations(schema):
        url = (path.replace("{task_id}", str(uuid.uuid4()))
               .replace("{worker_id}", "fuzz-worker"))
        response = httpx.request(method, f"{guarded.url}{url}", headers=headers, timeout=10,
                                 json={"prompt": "p", "task_type": "web_search"})
        if path in OPEN:
            assert response.status_code == 200, (path, response.text)
            continue
        checked.append(path)
        assert response.status_code == 401, (method, path, response.text)
        assert "token" in assert_useful_error(response).lower()
    assert "/route" in checked
    for extra in ("/openapi.json", "/docs"):  # served outside the schema, guarded as well
        response = httpx.get(f"{guarded.url}{extra}", headers=headers, timeout=10)
        assert response.status_code == 401, (extra, response.text)
