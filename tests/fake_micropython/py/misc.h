/* Stand-in for MicroPython's py/misc.h (tests only; see py/mpconfig.h):
   MICROPY_ROM_TEXT_COMPRESSION off. */
#ifndef MICROPY_INCLUDED_PY_MISC_H
#define MICROPY_INCLUDED_PY_MISC_H

#include "py/mpconfig.h"

#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>

typedef unsigned char byte;

#define MP_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* a compile-time check on an expression that is not an integer constant
   expression in C++ (addresses of objects) */
#if defined(__cplusplus)
#define MP_STATIC_ASSERT_NONCONSTEXPR(cond) ((void)1)
#else
#define MP_STATIC_ASSERT_NONCONSTEXPR(cond) ((void)sizeof(char[1 - 2 * !(cond)]))
#endif

typedef const char *mp_rom_error_text_t;
#define MP_COMPRESSED_ROM_TEXT(x) x
#define MP_ERROR_TEXT(x) (mp_rom_error_text_t)MP_COMPRESSED_ROM_TEXT(x)

#endif
