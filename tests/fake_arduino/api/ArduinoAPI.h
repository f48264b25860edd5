/* Stand-in for ArduinoCore-API's api/ArduinoAPI.h (tests only; see api/String.h). */
#pragma once

#include "Common.h"
#ifdef __cplusplus
#include "HardwareSerial.h"
#include "Print.h"
#include "Printable.h"
#include "Stream.h"
#include "String.h"
#endif
