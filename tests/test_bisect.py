"""`doit bisect` (pipeline/triage/bisect.py): the range of releases, and the search over them.
The whole command runs on real IREE releases in tests/test_versions.py."""
import pytest

from pipeline.core.errors import ConfigError
from pipeline.triage.bisect import UNTESTABLE, Outcome, search, version_range

AVAILABLE = ["3.13.0", "3.12.0", "3.11.0", "3.10.0", "3.9.0", "3.8.0", "3.7.1", "3.7.0", "2.9.0"]


def test_the_range_is_the_releases_between_its_ends_oldest_first():
    assert version_range("iree", "3.7.0..3.10.0", AVAILABLE) == ["3.7.0", "3.7.1", "3.8.0", "3.9.0", "3.10.0"]
    with pytest.raises(ConfigError, match="3.99.0.*is not a release of iree; available: 3.13.0, 3.12.0"):
        version_range("iree", "3.9.0..3.99.0", AVAILABLE)
    with pytest.raises(ConfigError, match="must be FIRST..LAST"):
        version_range("iree", "3.9.0", AVAILABLE)
    with pytest.raises(ConfigError, match="fewer than two releases"):
        version_range("iree", "3.9.0..3.9.0", AVAILABLE)


def _prober(first_bad: int, versions, untestable=()):
    asked = []

    def probe(v):
        asked.append(v)
        i = versions.index(v)
        status = UNTESTABLE if v in untestable else ("fail" if i >= first_bad else "pass")
        return Outcome(v, status, "verify: outside" if status == "fail" else "", None)
    return probe, asked


@pytest.mark.parametrize("first_bad", range(1, 9))
def test_the_search_finds_the_first_bad_release_in_log_steps(first_bad):
    versions = [f"1.{i}" for i in range(9)]
    probe, asked = _prober(first_bad, versions)
    assert search(versions, probe) == (versions[first_bad - 1], versions[first_bad])
    assert len(set(asked)) <= 2 + 3  # both ends, then ceil(log2(7)) middles


def test_no_transition_when_the_first_fails_or_the_last_passes():
    versions = ["1.0", "1.1", "1.2"]
    assert search(versions, _prober(0, versions)[0]) == (None, None)
    assert search(versions, _prober(5, versions)[0]) == (None, None)


def test_an_untestable_release_is_stepped_over():
    versions = [f"1.{i}" for i in range(7)]
    good, bad = search(versions, _prober(3, versions, untestable={"1.3"})[0])
    assert (good, bad) == ("1.2", "1.4")  # 1.3 between them could not be tested
    with pytest.raises(ConfigError, match="cannot be tested"):
        search(versions, _prober(3, versions, untestable={"1.0"})[0])
