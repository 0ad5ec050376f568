"""The simulated serving engine: a continuous-batching scheduler run in real time behind an OpenAI API."""
