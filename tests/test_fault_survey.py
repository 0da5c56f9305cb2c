"""Every case of the bad-input / fault survey ends in a clear error or a correct result."""
import fault_survey
import pytest


@pytest.mark.slow
@pytest.mark.parametrize("case", fault_survey.build_cases(), ids=lambda c: c.name)
def test_no_cryptic_or_silent_outcome(case):
    kind, msg = fault_survey.classify(case)
    assert kind in ("clear", "handled"), f"{kind}: {msg}"
