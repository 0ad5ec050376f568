from __future__ import annotations

from pathlib import Path

import pytest

from streamscope.errors import ConfigError
from streamscope_cli.workload.scenario import HostLoad, ScenarioError, load_scenario, parse, plan, shipped

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks" / "attribution"

REQUIRED = {
    "steady",
    "prefill-storm",
    "kv-pressure",
    "spec-collapse",
    "gateway-buffering",
    "flaky-network",
    "chunking-regression",
    "mixed",
    "gpu-trouble",
}


def test_the_required_scenarios_ship_and_parse():
    assert set(shipped()) >= REQUIRED
    for name in shipped():
        scenario = load_scenario(name)
        assert scenario.name == name and scenario.description
        assert len({node.node for node in scenario.nodes}) == len(scenario.nodes)


def test_plans_are_fixed_by_the_seed():
    scenario = load_scenario("mixed")
    first, again = plan(scenario), plan(scenario)
    assert first == again
    assert [s.at_s for s in first] == sorted(s.at_s for s in first)
    assert any(s.storm for s in first) and any(s.via_proxy for s in first)
    assert any(s.cancel_after_chunks for s in first) and any(s.spec_collapse for s in first)


def test_a_scenario_file_by_path(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("name: mine\nseed: 1\nnodes: [{name: a}]\nload: {streams: 3, output_tokens: {fixed: 9}}\n")
    scenario = load_scenario(str(path))
    assert [s.output_tokens for s in plan(scenario)] == [9, 9, 9]


BASE = {"name": "x", "seed": 1, "nodes": [{"name": "a"}]}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"seed": "one"}, "seed (integer) are required"),
        ({"nodes": []}, "nodes must be a non-empty list"),
        ({"surprise": 1}, "unknown key(s) surprise"),
        ({"load": {"cancel_rate": 2}}, "cancel_rate must be between 0 and 1"),
        ({"load": {"prompt_tokens": {"gaussian": 3}}}, "load.prompt_tokens"),
        ({"proxy": {"fronts": "b"}}, "proxy.fronts must name one of the nodes"),
        ({"inject": {"spec_collapse": {"fraction": 0.1}}}, "needs spec_decode on every node"),
        ({"inject": {"prefill_storm": {"node": "zz", "every_s": 1}}}, "does not have"),
        ({"nodes": [{"name": "a", "scheduler": {"num_blocks": 0}}]}, "must be positive"),
        ({"nodes": [{"name": "a", "flavor": "tgi"}]}, "flavor must be vllm or sglang"),
        (
            {"inject": {"host_load": {"target": "gpu", "period_s": 1, "busy_ms": 5}}},
            "target must be client, server or machine",
        ),
        (
            {"inject": {"host_load": {"target": "server", "period_s": 1, "busy_ms": 5}}},
            "host_load.node must name the node whose serving loop is blocked",
        ),
        (
            {"inject": {"host_load": {"target": "server", "node": "zz", "period_s": 1, "busy_ms": 5}}},
            "inject.host_load names node 'zz', which the scenario does not have",
        ),
        (
            {"inject": {"host_load": {"target": "server", "node": "a", "period_s": 1, "busy_ms": 5, "processes": 2}}},
            "unknown key(s) processes",
        ),
        ({"inject": {"host_load": {"target": "client", "busy_ms": 5}}}, "period_s and busy_ms are required"),
        ({"inject": {"host_load": {"target": "client", "period_s": 1, "busy_ms": -5}}}, "must be positive numbers"),
        ({"inject": {"host_load": {"target": "client", "period_s": 1, "busy_ms": 1000}}}, "busy_ms must be shorter"),
        (
            {"inject": {"host_load": {"target": "client", "period_s": 1, "busy_ms": 9, "jitter": 2}}},
            "host_load.jitter must be between 0 and 1",
        ),
        (
            {"inject": {"host_load": {"target": "client", "period_s": 1, "busy_ms": 9, "processes": 2}}},
            "unknown key(s) processes",
        ),
        ({"inject": {"host_load": {"target": "machine", "period_s": 1, "busy_ms": 9}}}, "processes must be a positive"),
        (
            {"inject": {"host_load": [{"target": "machine", "processes": 1, "period_s": 1, "busy_ms": 1500}]}},
            r"host_load[0]: busy_ms must not exceed the period",
        ),
        ({"inject": {"host_load": [7]}}, "host_load[0] must be a mapping"),
        (
            {"inject": {"gpu_throttle": {"node": "a", "every_s": 2, "for_s": 3}}},
            "gpu_throttle needs 0 < for_s < every_s and a factor above 1",
        ),
        ({"inject": {"gpu_throttle": {"node": "zz", "every_s": 2, "for_s": 1}}}, "does not have"),
        (
            {"inject": {"gpu_fault": {"node": "a", "every_s": 2, "for_s": 1, "xid": 0}}},
            "gpu_fault needs 0 < for_s < every_s and an XID above 0",
        ),
    ],
)
def test_bad_scenarios_say_what_is_wrong(change, message):
    escaped = message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[").replace("]", r"\]")
    with pytest.raises(ScenarioError, match=escaped) as error:
        parse({**BASE, **change}, "test.yaml")
    assert isinstance(error.value, ConfigError)


def test_unknown_scenario_names_list_the_shipped_ones():
    with pytest.raises(ScenarioError, match="shipped: chunking-regression"):
        load_scenario("no-such-scenario")


def test_host_load_is_one_mapping_or_a_list():
    one = parse({**BASE, "inject": {"host_load": {"target": "client", "period_s": 3, "busy_ms": 450}}}, "t")
    assert one.host_load == (HostLoad("client", 3.0, 450.0),)
    loads = [
        {"target": "client", "period_s": 2.2, "busy_ms": 350, "start_s": 1, "jitter": 0.5},
        {"target": "machine", "processes": 3, "period_s": 1, "busy_ms": 1000},
    ]
    several = parse({**BASE, "inject": {"host_load": loads}}, "t")
    assert several.host_load == (
        HostLoad("client", 2.2, 350.0, start_s=1.0, jitter=0.5),
        HostLoad("machine", 1.0, 1000.0, processes=3),
    )
    assert parse(BASE, "t").host_load == ()


@pytest.mark.parametrize("path", sorted(BENCHMARKS.glob("*/*.yaml")), ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_the_benchmark_scenarios_parse(path):
    scenario = load_scenario(str(path))
    assert scenario.name == path.stem and scenario.description
