"""Settings a test module gives a shared fixture through a marker, so one fixture serves every
module instead of a copy per module that differs only in its settings.

A module says ``pytestmark = pytest.mark.rig(stop_check_seconds=0.05)`` (or marks one test);
the fixture reads the closest such marker's keyword arguments.
"""

from __future__ import annotations

from typing import Any

import pytest

# The markers and what their keyword arguments set (registered by tests/conftest.py).
MARKERS = {
    "rig": "rig(**settings): the settings the rig fixture's Surehand runs with",
    "sh_settings": "sh_settings(**settings): the settings the sh fixture's Surehand runs with",
    "hostile_settings": "hostile_settings(**env): what the hostile_deployment worker sets besides",
    "retry_settings": "retry_settings(**settings): the deciding_client reconciler's settings",
}


def marked(request: pytest.FixtureRequest, name: str) -> dict[str, Any]:
    """The keyword arguments of the closest ``name`` marker of the requesting test (none: {})."""
    marker = request.node.get_closest_marker(name)
    return dict(marker.kwargs) if marker else {}
