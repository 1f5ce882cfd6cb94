"""Running a study: generating candidates from an OpenAI-compatible endpoint, and the generation figures."""
