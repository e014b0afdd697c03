"""Contract versions: a backend or environment definition declares the contract it was built
against, and one this core does not support is refused when it is loaded, in one line naming
the distribution, its contract and the supported one."""

from __future__ import annotations

from importlib import metadata

import pytest

from retrain.backends import catalog
from retrain.backends.create import BackendUnavailable, require_runnable
from retrain.backends.protocol import BACKEND_CONTRACT
from retrain.config.schema import BackendConfig, TrainConfig
from retrain.environments import catalog as environments
from retrain.environments.protocol import ENVIRONMENT_CONTRACT
from retrain.registry.contract import mismatch, supported_text, text

CORE = metadata.version("retrain-core")


@pytest.mark.parametrize(("declared", "upgrade"), [
    ((1, 0), None), ((1, 2), None), ((1, 3), None),
    ((1, 4), "retrain-core"), ((2, 0), "retrain-core"), ((0, 9), "retrain-backends-foo"),
])
def test_same_major_and_no_newer_minor_is_supported(declared, upgrade) -> None:  # type: ignore[no-untyped-def]
    problem = mismatch("backend", "retrain-backends-foo", declared, (1, 3))
    if upgrade is None:
        assert problem is None
    else:
        assert problem == (f"retrain-backends-foo declares backend contract {text(declared)}; "
                           f"retrain-core {CORE} supports backend contract 1.0 to 1.3: upgrade {upgrade}")


@pytest.mark.parametrize("declared", [None, "1.0", (1,), (True, 0), (1, -1), [1, 0]])
def test_an_undeclared_or_malformed_contract_is_refused(declared) -> None:  # type: ignore[no-untyped-def]
    problem = mismatch("environment", "my-envs 2.0", declared, (1, 0))
    assert problem is not None and problem.startswith("my-envs 2.0 declares ")
    assert f"retrain-core {CORE} supports environment contract 1.0" in problem


def test_texts() -> None:
    assert supported_text((1, 0)) == "1.0" and supported_text((2, 3)) == "2.0 to 2.3"
    assert text((1, 2)) == "1.2" and text(None) == "none" and text("x") == "'x'"


def backend_module(declared: object) -> dict[str, str]:
    return {"foo_backend/definition.py": (
        "from retrain.backends.catalog import BackendDefinition\n"
        f"BACKEND = BackendDefinition(name='foo', factory='foo_backend.create:make',\n"
        f"                            distribution='retrain-backends-foo', contract={declared!r})\n")}


def install_foo(install_distribution, declared: object) -> None:  # type: ignore[no-untyped-def]
    install_distribution("retrain-backends-foo", "0.3.0",
                         {"retrain.backends": {"foo": "foo_backend.definition:BACKEND"}},
                         backend_module(declared))


def test_a_backend_built_for_another_major_is_refused_at_load(install_distribution) -> None:  # type: ignore[no-untyped-def]
    major = BACKEND_CONTRACT[0] + 1
    install_foo(install_distribution, (major, 0))
    entry = catalog.lookup("foo")
    assert entry is not None and entry.installed and not entry.runnable
    line = (f"retrain-backends-foo 0.3.0 declares backend contract {major}.0; retrain-core {CORE} "
            f"supports backend contract {supported_text(BACKEND_CONTRACT)}: upgrade retrain-core")
    assert entry.problems == [line] and entry.status == "unusable (see problem)"
    assert entry.definition.note == line and entry.definition.contract == (major, 0)
    described = {b["name"]: b for b in catalog.describe_catalog()["entry_points"]}["foo"]
    assert described["contract"] == f"{major}.0" and described["problems"] == [line]
    config = TrainConfig(backend=BackendConfig(backend="foo"))
    with pytest.raises(BackendUnavailable) as err:
        require_runnable(config)
    assert str(err.value) == line


def test_a_backend_built_for_this_contract_runs(install_distribution) -> None:  # type: ignore[no-untyped-def]
    install_foo(install_distribution, (BACKEND_CONTRACT[0], 0))
    entry = catalog.lookup("foo")
    assert entry is not None and entry.runnable and entry.status == "available"
    require_runnable(TrainConfig(backend=BackendConfig(backend="foo")))


def test_a_backend_that_declares_no_contract_is_refused(install_distribution) -> None:  # type: ignore[no-untyped-def]
    install_foo(install_distribution, None)
    entry = catalog.lookup("foo")
    assert entry is not None and not entry.runnable
    assert entry.problems[0].startswith("retrain-backends-foo 0.3.0 declares no backend contract")


def test_a_builtin_name_takes_the_contract_its_distribution_declares(install_distribution) -> None:  # type: ignore[no-untyped-def]
    """A distribution registering a built-in name (the way retrain-backends-local does) is
    checked too: a contract core does not support makes it unusable."""
    if metadata.entry_points(group="retrain.backends", name="prime_rl"):
        pytest.skip("a real prime_rl backend is installed")
    install_distribution("retrain-backends-prime", "0.1.0",
                         {"retrain.backends": {"prime_rl": "prime_backend.definition:BACKEND"}},
                         {"prime_backend/definition.py": (
                             "from retrain.backends.catalog import BackendDefinition\n"
                             "BACKEND = BackendDefinition('prime_rl', 'prime_backend.create:create',\n"
                             "                            'retrain-backends-prime', contract=(9, 0))\n")})
    entry = catalog.lookup("prime_rl")
    assert entry is not None and entry.source == "builtin" and entry.installed
    assert not entry.runnable and "declares backend contract 9.0" in entry.definition.note


def environment_module(declared: object) -> dict[str, str]:
    return {"gym_envs/definition.py": (
        "from retrain.environments.protocol import EnvironmentDefinition\n"
        f"GYM = EnvironmentDefinition('gym', 'gym_envs.load:create', 'my-gym-envs', contract={declared!r})\n")}


def test_an_environment_provider_is_checked_at_load(install_distribution) -> None:  # type: ignore[no-untyped-def]
    major = ENVIRONMENT_CONTRACT[0]
    install_distribution("my-gym-envs", "1.2.0", {"retrain.environments": {"gym": "gym_envs.definition:GYM"}},
                         environment_module((major, ENVIRONMENT_CONTRACT[1] + 1)))
    entry = environments.lookup("gym")
    assert entry is not None and not entry.runnable and entry.distribution == "my-gym-envs"
    assert entry.problems == [
        f"my-gym-envs 1.2.0 declares environment contract {major}.{ENVIRONMENT_CONTRACT[1] + 1}; "
        f"retrain-core {CORE} supports environment contract {supported_text(ENVIRONMENT_CONTRACT)}: "
        "upgrade retrain-core"]
    assert "gym" in [e.name for e in environments.all_entries()]
    assert environments.lookup("no-such-provider") is None


def test_an_environment_provider_for_this_contract_is_available(install_distribution) -> None:  # type: ignore[no-untyped-def]
    install_distribution("my-gym-envs", "1.2.0", {"retrain.environments": {"gym": "gym_envs.definition:GYM"}},
                         environment_module(ENVIRONMENT_CONTRACT))
    entry = environments.lookup("gym")
    assert entry is not None and entry.runnable and entry.status == "available"


def test_a_broken_entry_point_is_listed_with_its_error(install_distribution) -> None:  # type: ignore[no-untyped-def]
    install_distribution("my-gym-envs", "1.2.0", {"retrain.environments": {"gym": "gym_envs.missing:GYM"}}, {})
    entry = environments.lookup("gym")
    assert entry is not None and entry.definition is None and not entry.runnable
    assert "failed to load: ModuleNotFoundError" in entry.problems[0]
