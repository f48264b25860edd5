/* Stand-in for MicroPython's py/runtime.h (tests only; see py/mpconfig.h). */
#ifndef MICROPY_INCLUDED_PY_RUNTIME_H
#define MICROPY_INCLUDED_PY_RUNTIME_H

#include "py/mpstate.h"

mp_obj_t mp_call_function_n_kw(mp_obj_t fun, size_t n_args, size_t n_kw, const mp_obj_t *args);

#if MICROPY_ERROR_REPORTING == MICROPY_ERROR_REPORTING_NONE
MP_NORETURN void mp_raise_type(const mp_obj_type_t *exc_type);
MP_NORETURN void mp_raise_ValueError_no_msg(void);
MP_NORETURN void mp_raise_TypeError_no_msg(void);
#define mp_raise_msg(exc_type, msg) mp_raise_type(exc_type)
#define mp_raise_msg_varg(exc_type, ...) mp_raise_type(exc_type)
#define mp_raise_ValueError(msg) mp_raise_ValueError_no_msg()
#define mp_raise_TypeError(msg) mp_raise_TypeError_no_msg()
#else
#define mp_raise_type(exc_type) mp_raise_msg(exc_type, NULL)
MP_NORETURN void mp_raise_msg(const mp_obj_type_t *exc_type, mp_rom_error_text_t msg);
MP_NORETURN void mp_raise_msg_varg(const mp_obj_type_t *exc_type, mp_rom_error_text_t fmt, ...);
MP_NORETURN void mp_raise_ValueError(mp_rom_error_text_t msg);
MP_NORETURN void mp_raise_TypeError(mp_rom_error_text_t msg);
#endif

#endif
