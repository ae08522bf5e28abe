"""The HTTP front door (FastAPI): ``create_app`` builds it, ``surehand api`` serves it.

Needs the ``api`` extra (``pip install 'surehand[api]'``).
"""

from __future__ import annotations

from surehand.api.app import create_app

__all__ = ["create_app"]
