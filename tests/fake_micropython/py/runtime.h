/* Stand-in for MicroPython's py/runtime.h (tests only). */
#ifndef FAKE_MP_PY_RUNTIME_H
#define FAKE_MP_PY_RUNTIME_H

#include "py/obj.h"

typedef const char *mp_rom_error_text_t;
#define MP_ERROR_TEXT(x) (x)

mp_obj_t mp_call_function_n_kw(mp_obj_t fun_in, size_t n_args, size_t n_kw, const mp_obj_t *args);
NORETURN void mp_raise_msg_varg(const mp_obj_type_t *exc_type, mp_rom_error_text_t fmt, ...);
NORETURN void mp_raise_ValueError(mp_rom_error_text_t msg);
NORETURN void mp_raise_TypeError(mp_rom_error_text_t msg);

#endif
