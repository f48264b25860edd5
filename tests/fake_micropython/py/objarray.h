/* Stand-in for MicroPython's py/objarray.h (tests only). */
#ifndef FAKE_MP_PY_OBJARRAY_H
#define FAKE_MP_PY_OBJARRAY_H

#include "py/obj.h"

/* typecode of bytearray in its buffer info */
#define BYTEARRAY_TYPECODE 1

typedef struct _mp_obj_array_t {
    mp_obj_base_t base;
    size_t typecode;
    size_t len;
    void *items;
} mp_obj_array_t;

#endif
