"""The fastText domain: the `.bin` file format (`bin_file`), the frozen vectors read from it (`vectors`),
training them (`training`), finding a moved `.bin` again (`location`) and whether vectors can serve as
biLM targets (`health`)."""

from elmoc_allennlp.fasttext.vectors import FastTextVectors  # noqa: F401
