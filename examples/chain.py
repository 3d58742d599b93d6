"""A question-answering chain with citations, over the bundled pages.

    python examples/chain.py ["QUESTION"]

The retriever's windows go into the prompt labelled [S1], [S2], ... with where each comes
from; the model answers citing those labels; the answer comes back with the sources it cites,
each with a link that opens the page at the cited passage.

With OPENAI_API_KEY set (and `pip install 'window-retriever[openai]'`) it asks OpenAI's
ChatOpenAI (model: OPENAI_MODEL, default gpt-4o-mini). Without it, it prints the exact prompt
it would send, and the sources, so you can see what the model would read.
"""

from __future__ import annotations

import os
import sys
import tempfile

from ingest_and_query import build_store  # the store of the bundled pages (same folder)

from window_retriever import ContextWindowRetriever
from window_retriever.citations import (
    CITATION_PROMPT,
    answer_with_sources,
    citation_sources,
    format_with_citations,
)

QUESTION = "What does the else clause of a try statement do?"
HOW_TO_ANSWER = "To get an answer: pip install 'window-retriever[openai]' and set OPENAI_API_KEY."


def main() -> int:
    question = sys.argv[1] if len(sys.argv) > 1 else QUESTION
    llm = None
    if os.environ.get("OPENAI_API_KEY"):
        try:
            from langchain_openai import ChatOpenAI
        except ImportError:
            print(
                "OPENAI_API_KEY is set, but langchain-openai is not installed: "
                "pip install 'window-retriever[openai]'",
                file=sys.stderr,
            )
            return 2
        llm = ChatOpenAI(model=os.environ.get("OPENAI_MODEL", "gpt-4o-mini"), temperature=0)

    with tempfile.TemporaryDirectory(prefix="window-retriever-example-") as directory:
        store, _ = build_store(directory)
        # One budget for the whole context: change total_budget, and nothing else, to give
        # the model more or less to read.
        retriever = ContextWindowRetriever(vectorstore=store, total_budget=2000)

        if llm is not None:
            chain = answer_with_sources(retriever, CITATION_PROMPT, llm)
            result = chain.invoke(question)
            print(f"Q: {question}\n\n{result['answer']}\n\nSources:")
            for label, source in result["sources"].items():
                print(f"[{label}] {source.get('title', '')}: {source.get('url')}")
            return 0

        # No model: show what answer_with_sources would send it, message by message.
        documents = retriever.invoke(question)
        prompt = CITATION_PROMPT.invoke(
            {"context": format_with_citations(documents), "question": question}
        )
        print("The prompt this chain would send to the model:\n")
        for message in prompt.to_messages():
            print(f"--- {message.type} ---\n{message.content}\n")
        print("Its sources, by label:")
        for label, source in citation_sources(documents).items():
            print(f"[{label}] {source.get('url', source.get('source', '?'))}")
        print(f"\n{HOW_TO_ANSWER}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
