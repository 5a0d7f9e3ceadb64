"""allennlp's out.log reports a full disk once, naming the file (compat/quiet_log_files.py)."""
import errno
import logging

import allennlp.common.logging as common_logging

import elmoc_allennlp  # noqa: F401  (installs the shims)


class FullDisk:
    def write(self, text):
        raise OSError(errno.ENOSPC, "No space left on device")

    def flush(self):
        pass


def test_a_full_disk_is_reported_once_naming_the_log_file(tmp_path, capsys):
    root = logging.getLogger()
    saved_handlers, saved_level = list(root.handlers), root.level
    try:
        common_logging.prepare_global_logging(str(tmp_path), rank=0, world_size=1)
        file_handlers = [h for h in root.handlers if isinstance(h, logging.FileHandler)]
        assert file_handlers
        for handler in file_handlers:
            handler.stream = FullDisk()
        for index in range(3):
            logging.getLogger("elmoc_test").warning("record %d", index)
        errors = capsys.readouterr().err
        assert errors.count("out.log failed") == 1 and "Traceback" not in errors
    finally:
        for handler in root.handlers:
            if handler not in saved_handlers:
                handler.stream = None if isinstance(handler, logging.FileHandler) else handler.stream
        root.handlers[:] = saved_handlers
        root.setLevel(saved_level)
