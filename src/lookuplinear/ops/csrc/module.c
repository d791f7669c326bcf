/* The importable module lookuplinear._kernels._lib: it defines no Python functions, it only lets
 * the import system find the shared library, whose kernels lookuplinear/_kernels/_clib.py calls
 * through ctypes. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "common.h"

/* raised whenever an exported function changes: the loader refuses a library of another version */
int64_t ll_version(void) { return 14; }

static struct PyModuleDef ll_module = {
    PyModuleDef_HEAD_INIT, "_lib", "lookuplinear's C kernels, called through ctypes.", -1, NULL,
    NULL, NULL, NULL, NULL};
PyMODINIT_FUNC PyInit__lib(void) { return PyModule_Create(&ll_module); }
