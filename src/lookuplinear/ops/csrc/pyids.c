/* String IDs to int64 keys through a Python dict, for lookuplinear/_idmap.py (an IdMap with
 * key_type="str"): the dict lookups of a batch in one C loop, without a Python call per ID.
 * Entry points of this file use the Python C API: they are called through ctypes.PyDLL, which
 * holds the GIL during the call and raises the Python error an entry point sets. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "common.h"

#define AHEAD 8

/* out[i] = dict[items[i]] (an int) where present, else -1, for the n items of a list, or where
 * data is not NULL for the n objects at data (a numpy object array's). Returns how many were
 * absent, or -1 with a Python error set (an unhashable item). */
__attribute__((visibility("default"))) int64_t ll_dict_keys(PyObject *dict, PyObject *list,
                                                            PyObject *const *data, int64_t n,
                                                            int64_t *out) {
    PyObject *const *item = data ? data : PySequence_Fast_ITEMS(list);
    int64_t absent = 0;
    for (int64_t i = 0; i < n; i++) {
        if (i + AHEAD < n) __builtin_prefetch(item[i + AHEAD]);  /* its cached hash */
        PyObject *v = PyDict_GetItemWithError(dict, item[i]);
        if (v == NULL) {
            if (PyErr_Occurred()) return -1;
            out[i] = -1;
            absent++;
        } else {
            out[i] = PyLong_AsLongLong(v);
        }
    }
    return absent;
}
