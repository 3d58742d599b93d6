"""LangChain's standard retriever tests, run against the real stack."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_tests.integration_tests import RetrieversIntegrationTests

from tests.helpers.pages import example_store
from window_retriever import ContextWindowRetriever

pytestmark = pytest.mark.integration


class TestContextWindowRetrieverStandard(RetrieversIntegrationTests):
    @property
    def retriever_constructor(self) -> type[ContextWindowRetriever]:
        return ContextWindowRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        store, _, _ = example_store()
        return {"vectorstore": store, "window_budget": 800}

    @property
    def retriever_query_example(self) -> str:
        return "How do I handle an exception?"
