// The paper's Table 3 row "CNN-CC" under its earlier name here (it was labelled ELMo-C_CNN):
// see elmoc_cnn_cc.jsonnet, which this file is.
import 'elmoc_cnn_cc.jsonnet'
