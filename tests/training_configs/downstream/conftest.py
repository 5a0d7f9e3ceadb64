from tests.downstream.conftest import _one_torch_thread, downstream_environment  # noqa: F401
