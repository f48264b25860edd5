/* Stand-in for MicroPython's py/mpconfig.h (tests only).

   Every stand-in header under tests/fake_micropython/py/ declares a subset of
   the real header of the same name (MicroPython 1c3c201, v1.29 preview):
   only what the generated user C modules use, with the real names and
   signatures, written for these tests. The port's choices come from
   <mpconfigport.h> (tests/fake_micropython/port/), as in a real port. */
#ifndef MICROPY_INCLUDED_PY_MPCONFIG_H
#define MICROPY_INCLUDED_PY_MPCONFIG_H

#include <stdint.h>
#include <limits.h>

#include <mpconfigport.h>

/* feature levels: a port picks one, options default from it */
#define MICROPY_CONFIG_ROM_LEVEL_MINIMUM (0)
#define MICROPY_CONFIG_ROM_LEVEL_CORE_FEATURES (10)
#define MICROPY_CONFIG_ROM_LEVEL_BASIC_FEATURES (20)
#define MICROPY_CONFIG_ROM_LEVEL_EXTRA_FEATURES (30)
#define MICROPY_CONFIG_ROM_LEVEL_FULL_FEATURES (40)
#define MICROPY_CONFIG_ROM_LEVEL_EVERYTHING (50)
#ifndef MICROPY_CONFIG_ROM_LEVEL
#define MICROPY_CONFIG_ROM_LEVEL (MICROPY_CONFIG_ROM_LEVEL_CORE_FEATURES)
#endif
#define MICROPY_CONFIG_ROM_LEVEL_AT_LEAST_CORE_FEATURES (MICROPY_CONFIG_ROM_LEVEL >= MICROPY_CONFIG_ROM_LEVEL_CORE_FEATURES)
#define MICROPY_CONFIG_ROM_LEVEL_AT_LEAST_FULL_FEATURES (MICROPY_CONFIG_ROM_LEVEL >= MICROPY_CONFIG_ROM_LEVEL_FULL_FEATURES)

/* object representations (the stand-in py/obj.h implements A) */
#define MICROPY_OBJ_REPR_A (0)
#define MICROPY_OBJ_REPR_B (1)
#define MICROPY_OBJ_REPR_C (2)
#define MICROPY_OBJ_REPR_D (3)
#ifndef MICROPY_OBJ_REPR
#define MICROPY_OBJ_REPR (MICROPY_OBJ_REPR_A)
#endif
#ifndef MICROPY_OBJ_IMMEDIATE_OBJS
#define MICROPY_OBJ_IMMEDIATE_OBJS (MICROPY_OBJ_REPR != MICROPY_OBJ_REPR_D)
#endif

/* machine-word integers */
#define MP_INT_TYPE_INTPTR (0)
#define MP_INT_TYPE_INT64 (1)
#define MP_INT_TYPE_OTHER (2)
#if !defined(MP_INT_TYPE)
#if MICROPY_OBJ_REPR == MICROPY_OBJ_REPR_D
#define MP_INT_TYPE (MP_INT_TYPE_INT64)
#else
#define MP_INT_TYPE (MP_INT_TYPE_INTPTR)
#endif
#endif
#if MP_INT_TYPE == MP_INT_TYPE_INTPTR
typedef intptr_t mp_int_t;
typedef uintptr_t mp_uint_t;
#elif MP_INT_TYPE == MP_INT_TYPE_INT64
typedef int64_t mp_int_t;
typedef uint64_t mp_uint_t;
#endif

/* exception messages */
#define MICROPY_ERROR_REPORTING_NONE (0)
#define MICROPY_ERROR_REPORTING_TERSE (1)
#define MICROPY_ERROR_REPORTING_NORMAL (2)
#define MICROPY_ERROR_REPORTING_DETAILED (3)
#ifndef MICROPY_ERROR_REPORTING
#if MICROPY_CONFIG_ROM_LEVEL_AT_LEAST_FULL_FEATURES
#define MICROPY_ERROR_REPORTING (MICROPY_ERROR_REPORTING_DETAILED)
#elif MICROPY_CONFIG_ROM_LEVEL_AT_LEAST_CORE_FEATURES
#define MICROPY_ERROR_REPORTING (MICROPY_ERROR_REPORTING_NORMAL)
#else
#define MICROPY_ERROR_REPORTING (MICROPY_ERROR_REPORTING_TERSE)
#endif
#endif

/* floats: mp_float_t is the port's float type (double on the unix port) */
#define MICROPY_FLOAT_IMPL_NONE (0)
#define MICROPY_FLOAT_IMPL_FLOAT (1)
#define MICROPY_FLOAT_IMPL_DOUBLE (2)
#ifndef MICROPY_FLOAT_IMPL
#define MICROPY_FLOAT_IMPL (MICROPY_FLOAT_IMPL_NONE)
#endif
#if MICROPY_FLOAT_IMPL == MICROPY_FLOAT_IMPL_FLOAT
#define MICROPY_PY_BUILTINS_FLOAT (1)
typedef float mp_float_t;
#elif MICROPY_FLOAT_IMPL == MICROPY_FLOAT_IMPL_DOUBLE
#define MICROPY_PY_BUILTINS_FLOAT (1)
typedef double mp_float_t;
#else
#define MICROPY_PY_BUILTINS_FLOAT (0)
#endif

/* the array module */
#ifndef MICROPY_PY_ARRAY
#define MICROPY_PY_ARRAY (MICROPY_CONFIG_ROM_LEVEL_AT_LEAST_CORE_FEATURES)
#endif

#ifndef MICROPY_OBJ_BASE_ALIGNMENT
#define MICROPY_OBJ_BASE_ALIGNMENT
#endif

#ifndef MP_NORETURN
#define MP_NORETURN __attribute__((noreturn))
#endif

#endif
