"""With the switch, allennlp's out.log reports a full disk once, naming the file
(hardening/quiet_log_files.py); without it, allennlp's handlers are left as they are."""

import errno

import pytest
import logging

import allennlp.common.logging as common_logging

import elmoc_allennlp  # noqa: F401  (installs the shims)
from elmoc_allennlp.hardening import hardened_everywhere


class FullDisk:
    def write(self, text):
        raise OSError(errno.ENOSPC, "No space left on device")

    def flush(self):
        pass


@pytest.mark.parametrize("switch", [True, False])
def test_a_full_disk_is_reported_once_naming_the_log_file(tmp_path, capsys, switch):
    root = logging.getLogger()
    saved_handlers, saved_level = list(root.handlers), root.level
    try:
        if switch:
            with hardened_everywhere():
                common_logging.prepare_global_logging(str(tmp_path), rank=0, world_size=1)
        else:
            common_logging.prepare_global_logging(str(tmp_path), rank=0, world_size=1)
        file_handlers = [h for h in root.handlers if isinstance(h, logging.FileHandler)]
        assert file_handlers
        for handler in file_handlers:
            handler.stream = FullDisk()
        for index in range(3):
            logging.getLogger("elmoc_test").warning("record %d", index)
        errors = capsys.readouterr().err
        if switch:
            assert errors.count("out.log failed") == 1 and "Traceback" not in errors
        else:  # stock: logging's own report of each failed record
            assert "out.log failed" not in errors and errors.count("Traceback") >= 3
    finally:
        for handler in root.handlers:
            if handler not in saved_handlers:
                handler.stream = (
                    None if isinstance(handler, logging.FileHandler) else handler.stream
                )
        root.handlers[:] = saved_handlers
        root.setLevel(saved_level)
