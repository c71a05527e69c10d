"""The FastAPI service over ``predictor.engine.engine``: HTTP API, WebSocket stream and dashboard."""
