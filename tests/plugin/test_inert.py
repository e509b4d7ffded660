"""The plugin in a pytest run that asks for no cluster: another project's tests in the same
environment run as if it were not installed; its option names leave a conftest's own options
alone; its ``node`` parameter is for acceptance checks only."""

from __future__ import annotations

import pytest

OWN_TESTS = """
import pytest

@pytest.fixture
def node():
    return "my-own-node"

def test_uses_its_own_node(node):
    assert node == "my-own-node"

def test_plain():
    assert 1 + 1 == 2
"""

CONFTEST_WITH_COMMON_OPTIONS = """
def pytest_addoption(parser):
    parser.addoption("--dry-run", action="store_true")
    parser.addoption("--nodes", default="")
    parser.addoption("--results", default="")
    parser.addoption("--baseline", default="")
"""


@pytest.fixture
def other_project(pytester: pytest.Pytester) -> pytest.Pytester:
    """A project of its own: no thresholds.toml, no ini key of the plugin, its own conftest."""
    pytester.makeini("[pytest]\naddopts = -p no:cacheprovider\n")
    pytester.makeconftest(CONFTEST_WITH_COMMON_OPTIONS)
    pytester.makepyfile(test_own=OWN_TESTS)
    return pytester


def test_another_projects_run_is_untouched(other_project):
    result = other_project.runpytest_subprocess("--dry-run", "--nodes=a,b", "--results=x", "--baseline=y")
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    result.assert_outcomes(passed=2)
    out = result.stdout.str()
    assert "gpucluster:" not in out and "thresholds.toml" not in result.stderr.str()


@pytest.mark.parametrize("args", [["--markers"], ["--fixtures"], ["--co"], ["--help"]])
def test_another_projects_markers_fixtures_and_collection_work(other_project, args):
    result = other_project.runpytest_subprocess(*args)
    assert result.ret == 0, result.stderr.str()
    if args == ["--co"]:
        result.stdout.fnmatch_lines(["*test_uses_its_own_node*", "*test_plain*"])
    if args == ["--help"]:
        result.stdout.fnmatch_lines(["*--gpucluster-results=PATH*", "*--dry-run*"])


def test_a_plugin_option_without_a_cluster_says_what_is_missing(other_project):
    result = other_project.runpytest_subprocess("--gpucluster-dry-run")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--gpucluster-dry-run: this run tests no cluster; add --cluster=NAME*"])


def test_a_cluster_run_leaves_a_tests_own_node_fixture_and_options_alone(other_project):
    other_project.makepyfile(
        test_check="""
        def test_a_check(judge, node):
            assert node != "my-own-node"
        """
    )
    result = other_project.runpytest_subprocess("test_own.py", "test_check.py", "--cluster=local", "--dry-run", "-v")
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    out = result.stdout.str()
    assert "test_uses_its_own_node PASSED" in out  # not parametrised by the plugin
    assert "test_a_check[" in out  # the check runs once per tested node


def test_the_header_says_where_the_thresholds_came_from(gpc):
    gpc.makepyfile("def test_x():\n    pass\n")
    result = gpc.runpytest_subprocess()
    result.stdout.fnmatch_lines(
        [f"gpucluster: profile 'local' (local); thresholds {gpc.path / 'thresholds.toml'} (the rootdir (*)), set 'cpu'"]
    )
