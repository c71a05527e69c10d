"""The FastAPI service over ``predictor.engine``: HTTP API, WebSocket stream and dashboard."""
