/* Stand-in for ArduinoCore-API's api/Common.h (tests only; see api/String.h). */
#pragma once

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

unsigned long millis(void);
unsigned long micros(void);

#ifdef __cplusplus
}
#endif
