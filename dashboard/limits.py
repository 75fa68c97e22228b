"""Parsing limits on console forms: what a refused request is told, and JSON form fields
that cannot be made to recurse.

Django refuses a form body over ``DATA_UPLOAD_MAX_MEMORY_SIZE`` or with more than
``DATA_UPLOAD_MAX_NUMBER_FIELDS`` fields (``RequestDataTooBig``, ``TooManyFieldsSent``)
the first time anything reads ``request.POST``, the CSRF check included, and answers
``handler400``: ``bad_request`` here says which limit, on the console's own page.

``BoundedJSONField`` is the form field for every JSON model field an admin form edits:
Django's ``forms.JSONField`` hands the text to ``json.loads``, which raises
``RecursionError`` (a 500) on ``[[[[...`` nested a few thousand deep. This one refuses a
value over ``max_chars`` before parsing and turns a too-deep one into a form error.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.conf import settings
from django.core.exceptions import (
    RequestDataTooBig,
    TooManyFieldsSent,
    TooManyFilesSent,
    ValidationError,
)
from django.forms.fields import InvalidJSONInput
from django.http import HttpRequest, HttpResponse
from django.template.loader import render_to_string

__all__ = ["JSON_FIELD_MAX_CHARS", "BoundedJSONField", "bad_request"]

JSON_FIELD_MAX_CHARS = 65_536


def bad_request(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """``handler400``: the console's page, saying which limit the request passed."""
    if isinstance(exception, RequestDataTooBig):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        reason = f"The form was larger than the console accepts ({limit:,} bytes)."
    elif isinstance(exception, TooManyFieldsSent):
        limit = settings.DATA_UPLOAD_MAX_NUMBER_FIELDS
        reason = f"The form had more fields than the console accepts ({limit:,})."
    elif isinstance(exception, TooManyFilesSent):
        limit = settings.DATA_UPLOAD_MAX_NUMBER_FILES
        reason = f"The form had more files than the console accepts ({limit:,})."
    else:
        reason = "The console could not read this request."
    body = render_to_string("400.html", {"reason": reason})
    return HttpResponse(body, status=400)


class BoundedJSONField(forms.JSONField):
    """``forms.JSONField`` with a length cap and no ``RecursionError``."""

    def __init__(self, *, max_chars: int = JSON_FIELD_MAX_CHARS, **kwargs: Any) -> None:
        self.max_chars = max_chars
        super().__init__(**kwargs)

    def to_python(self, value: Any) -> Any:
        if isinstance(value, str) and len(value) > self.max_chars:
            raise ValidationError(
                f"At most {self.max_chars:,} characters of JSON (this has {len(value):,}).",
                code="max_length",
            )
        try:
            return super().to_python(value)
        except RecursionError:
            raise ValidationError("This JSON is nested too deeply.", code="invalid") from None

    def bound_data(self, data: Any, initial: Any) -> Any:
        if isinstance(data, str) and len(data) > self.max_chars:
            return InvalidJSONInput(data[: self.max_chars])
        try:
            return super().bound_data(data, initial)
        except RecursionError:
            return InvalidJSONInput(data)
