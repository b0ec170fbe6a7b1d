"""The suite's pytest configuration: warnings are errors, except the one pytest-asyncio
(when installed) raises about its unset fixture loop scope, which this suite does not use
(its async tests run through anyio's plugin). Issue 26: with pytest-asyncio installed,
that warning met ``filterwarnings = ["error"]`` and stopped the run."""
import warnings

import pytest

# pytest-asyncio's text (pytest_asyncio/plugin.py, _DEFAULT_FIXTURE_LOOP_SCOPE_UNSET).
UNSET = ('The configuration option "asyncio_default_fixture_loop_scope" is unset.\n'
         "The event loop scope for asynchronous fixtures will default to the fixture caching "
         "scope.")


def test_pytest_asyncio_unset_loop_scope_warning_is_not_an_error():
    warnings.warn(pytest.PytestDeprecationWarning(UNSET))


def test_other_deprecation_warnings_are_still_errors():
    with pytest.raises(pytest.PytestDeprecationWarning):
        warnings.warn(pytest.PytestDeprecationWarning("some other deprecation"))
