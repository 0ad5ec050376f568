from __future__ import annotations

import pytest

from streamscope.errors import ConfigError
from streamscope_cli.workload.scenario import ScenarioError, load_scenario, parse, plan, shipped

REQUIRED = {
    "steady",
    "prefill-storm",
    "kv-pressure",
    "spec-collapse",
    "gateway-buffering",
    "flaky-network",
    "chunking-regression",
    "mixed",
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
    ],
)
def test_bad_scenarios_say_what_is_wrong(change, message):
    with pytest.raises(ScenarioError, match=message.replace("(", r"\(").replace(")", r"\)")) as error:
        parse({**BASE, **change}, "test.yaml")
    assert isinstance(error.value, ConfigError)


def test_unknown_scenario_names_list_the_shipped_ones():
    with pytest.raises(ScenarioError, match="shipped: chunking-regression"):
        load_scenario("no-such-scenario")
