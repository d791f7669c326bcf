/* The importable module lookuplinear.ops._lib: it defines no Python functions, it only lets
 * the import system find the shared library, whose kernels lookuplinear/ops/_clib.py calls
 * through ctypes. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "common.h"

/* The ABI version, raised whenever an exported function changes: the loader refuses a library
 * of another version. Its one source is VERSION in ops/_clib.py; setup.py passes it here. */
#ifndef LL_ABI_VERSION
#error "LL_ABI_VERSION is undefined: build with setup.py, which reads VERSION from ops/_clib.py"
#endif
int64_t ll_version(void) { return LL_ABI_VERSION; }

static struct PyModuleDef ll_module = {
    PyModuleDef_HEAD_INIT, "_lib", "lookuplinear's C kernels, called through ctypes.", -1, NULL,
    NULL, NULL, NULL, NULL};
PyMODINIT_FUNC PyInit__lib(void) { return PyModule_Create(&ll_module); }
