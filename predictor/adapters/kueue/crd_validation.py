"""Validate Kubernetes objects against the OpenAPI v3 schemas inside CustomResourceDefinitions.

A CRD's ``openAPIV3Schema`` is JSON Schema plus Kubernetes extensions; they are translated so the
``jsonschema`` library checks what the API server's structural validation checks:

* ``x-kubernetes-int-or-string: true`` -> an integer or a string;
* ``nullable: true`` -> null is allowed too;
* ``format: int32``/``int64`` -> the integer range (``jsonschema`` ignores formats);
* ``x-kubernetes-preserve-unknown-fields`` -> any field allowed there;
* everywhere else unknown fields are errors, as with ``kubectl apply --validate=strict`` (the API
  server would silently prune them: a typo would vanish, which is what this check is for);
* ``metadata`` is checked like ObjectMeta: a DNS-1123 ``name`` (and ``namespace``), string labels
  and annotations.

``x-kubernetes-validations`` (CEL rules) are evaluated with ``cel-python`` on the values they are
attached to, as the API server does on create: transition rules (those reading ``oldSelf``) apply
only to updates and are skipped, and a rule the library cannot compile (a Kubernetes-only CEL
extension) is skipped too; ``rules_evaluated`` / ``rules_skipped`` count them per kind.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import celpy
import yaml
from jsonschema import Draft4Validator

from features.errors import InputError

__all__ = ["CrdSchemas", "ValidationFailure"]

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: the Workload CRD is 1.4 MB
_DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
_DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
_INT_RANGE = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}
_OBJECT_META = {
    "type": "object",
    "required": ["name"],
    "properties": {
        "name": {"type": "string", "maxLength": 253, "pattern": _DNS_SUBDOMAIN},
        "namespace": {"type": "string", "maxLength": 63, "pattern": _DNS_LABEL},
        "labels": {"type": "object", "additionalProperties": {"type": "string", "maxLength": 63}},
        "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
    },
}


@dataclass(frozen=True)
class CelRule:
    """One CEL rule and where it sits: ``path`` steps are property names, ``[]`` (each list item)
    and ``{}`` (each map value)."""

    path: tuple[str, ...]
    rule: str
    message: str
    program: Any = field(compare=False, repr=False)


def _collect_rules(node: Any, path: tuple[str, ...], env: celpy.Environment,
                   out: list[CelRule], skipped: list[str]) -> None:
    if not isinstance(node, dict):
        return
    for r in node.get("x-kubernetes-validations") or ():
        rule = r["rule"]
        if "oldSelf" in rule:
            skipped.append(rule)  # transition rule: checked on update only
            continue
        try:
            program = env.program(env.compile(rule))
        except Exception:  # noqa: BLE001 - any compile failure means "cannot evaluate here"
            skipped.append(rule)
            continue
        out.append(CelRule(path, rule, r.get("message") or f"failed rule: {rule}", program))
    for name, sub in (node.get("properties") or {}).items():
        _collect_rules(sub, (*path, name), env, out, skipped)
    if isinstance(node.get("items"), dict):
        _collect_rules(node["items"], (*path, "[]"), env, out, skipped)
    if isinstance(node.get("additionalProperties"), dict):
        _collect_rules(node["additionalProperties"], (*path, "{}"), env, out, skipped)


def _select(value: Any, path: tuple[str, ...], where: str = "") -> list[tuple[str, Any]]:
    """The values at ``path`` inside ``value`` (expanding lists and maps), with their dotted paths."""
    if not path:
        return [(where or "(object)", value)]
    step, rest = path[0], path[1:]
    if step == "[]":
        items = enumerate(value) if isinstance(value, list) else ()
        return [hit for i, v in items for hit in _select(v, rest, f"{where}.{i}".lstrip("."))]
    if step == "{}":
        items = value.items() if isinstance(value, dict) else ()
        return [hit for k, v in items for hit in _select(v, rest, f"{where}.{k}".lstrip("."))]
    if isinstance(value, dict) and step in value:
        return _select(value[step], rest, f"{where}.{step}".lstrip("."))
    return []


class ValidationFailure(ValueError):
    """An object does not match its CRD schema; ``problems`` lists each as ``path: message``."""

    def __init__(self, what: str, problems: list[str]):
        super().__init__(f"{what}: " + "; ".join(problems))
        self.problems = problems


def _translate(node: Any, counter: list[int]) -> Any:
    """Turn an OpenAPI v3 (Kubernetes flavour) schema node into plain JSON Schema (draft 4)."""
    if isinstance(node, list):
        return [_translate(n, counter) for n in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "x-kubernetes-validations":
            counter[0] += len(value)
        elif key in ("properties", "patternProperties", "definitions"):
            out[key] = {k: _translate(v, counter) for k, v in value.items()}
        elif key in ("description", "example", "externalDocs") or key.startswith("x-kubernetes-"):
            continue
        elif isinstance(value, (dict, list)):
            out[key] = _translate(value, counter)
        else:
            out[key] = value
    if node.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}] + out.get("anyOf", [])
        if len(out["anyOf"]) > 2:  # the CRD's own anyOf (same two types) stays as a second condition
            out["allOf"] = [{"anyOf": out["anyOf"][2:]}]
            out["anyOf"] = out["anyOf"][:2]
    if node.get("type") == "integer" and node.get("format") in _INT_RANGE:
        lo, hi = _INT_RANGE[node["format"]]
        out.setdefault("minimum", lo)
        out.setdefault("maximum", hi)
    if node.get("nullable") and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    out.pop("nullable", None)
    out.pop("format", None)  # formats Kubernetes uses (int32, date-time, ...) are checked above or not at all
    if ("properties" in out and "additionalProperties" not in out
            and not node.get("x-kubernetes-preserve-unknown-fields")):
        out["additionalProperties"] = False
    return out


@dataclass
class CrdSchemas:
    """Validators for every served version of the CRDs found in a folder."""

    validators: dict[tuple[str, str], Draft4Validator] = field(default_factory=dict)  # (apiVersion, kind)
    rules: dict[tuple[str, str], list[CelRule]] = field(default_factory=dict)  # (apiVersion, kind) -> CEL
    namespaced: dict[str, bool] = field(default_factory=dict)  # kind -> namespaced?
    rules_evaluated: dict[str, int] = field(default_factory=dict)  # kind -> CEL rules checked on create
    rules_skipped: dict[str, int] = field(default_factory=dict)  # kind -> transition / uncompilable rules
    sources: dict[str, Path] = field(default_factory=dict)  # kind -> CRD file

    @classmethod
    def from_folder(cls, folder: str | Path) -> CrdSchemas:
        """Load every ``*.yaml`` CRD in ``folder``."""
        folder = Path(folder)
        files = sorted(folder.glob("*.yaml"))
        if not files:
            raise InputError(f"{folder}: no CustomResourceDefinition YAML files found")
        schemas = cls()
        for path in files:
            for doc in yaml.load_all(path.read_text(), Loader=_LOADER):
                if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
                    schemas.add_crd(doc, path)
        return schemas

    def add_crd(self, crd: dict[str, Any], source: Path | None = None) -> None:
        spec = crd["spec"]
        kind = spec["names"]["kind"]
        self.namespaced[kind] = spec.get("scope") == "Namespaced"
        env = celpy.Environment()
        for version in spec["versions"]:
            if not version.get("served", True):
                continue
            counter = [0]
            rules: list[CelRule] = []
            skipped: list[str] = []
            _collect_rules(version["schema"]["openAPIV3Schema"], (), env, rules, skipped)
            self.rules[(f"{spec['group']}/{version['name']}", kind)] = rules
            self.rules_evaluated[kind] = max(self.rules_evaluated.get(kind, 0), len(rules))
            schema = _translate(copy.deepcopy(version["schema"]["openAPIV3Schema"]), counter)
            schema.setdefault("properties", {})["metadata"] = _OBJECT_META
            schema["required"] = sorted({*schema.get("required", ()), "apiVersion", "kind", "metadata"})
            schema["properties"]["apiVersion"] = {"enum": [f"{spec['group']}/{version['name']}"]}
            schema["properties"]["kind"] = {"enum": [kind]}
            self.validators[(f"{spec['group']}/{version['name']}", kind)] = Draft4Validator(schema)
            self.rules_skipped[kind] = max(self.rules_skipped.get(kind, 0), len(skipped))
        if source is not None:
            self.sources[kind] = source

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(sorted(self.namespaced))

    def problems(self, obj: dict[str, Any]) -> list[str]:
        """Every schema violation of ``obj`` as ``path: message`` (empty when valid)."""
        key = (obj.get("apiVersion"), obj.get("kind"))
        validator = self.validators.get(key)  # type: ignore[arg-type]
        if validator is None:
            return [f"no CRD schema for apiVersion={key[0]!r} kind={key[1]!r}"]
        out = []
        for err in sorted(validator.iter_errors(obj), key=lambda e: list(e.absolute_path)):
            path = ".".join(str(p) for p in err.absolute_path) or "(object)"
            out.append(f"{path}: {err.message}")
        if not out:  # CEL rules assume a structurally valid object, as the API server's do
            out += self._cel_problems(obj, self.rules.get(key, []))  # type: ignore[arg-type]
        namespaced = self.namespaced.get(str(key[1]))
        has_ns = "namespace" in (obj.get("metadata") or {})
        if namespaced and not has_ns:
            out.append(f"metadata.namespace: required for the namespaced kind {key[1]}")
        if namespaced is False and has_ns:
            out.append(f"metadata.namespace: {key[1]} is cluster-scoped")
        return out

    @staticmethod
    def _cel_problems(obj: dict[str, Any], rules: list[CelRule]) -> list[str]:
        out = []
        for r in rules:
            for where, value in _select(obj, r.path):
                result = r.program.evaluate({"self": celpy.json_to_cel(value)})
                if isinstance(result, celpy.CELEvalError):
                    out.append(f"{where}: rule {r.rule!r} could not be evaluated ({result.args[0] if result.args else result})")
                elif not bool(result):
                    out.append(f"{where}: {r.message}")
        return out

    def validate(self, obj: dict[str, Any]) -> None:
        """Raise ``ValidationFailure`` naming the object and each problem."""
        problems = self.problems(obj)
        if problems:
            meta = obj.get("metadata") or {}
            raise ValidationFailure(f"{obj.get('kind')} {meta.get('namespace', '')}/{meta.get('name')}".replace(" /", " "),
                                    problems)

    def validate_all(self, objs: Iterable[dict[str, Any]]) -> int:
        """Validate every object; return how many were checked."""
        n = 0
        for obj in objs:
            self.validate(obj)
            n += 1
        return n
