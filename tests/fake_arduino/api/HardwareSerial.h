/* Stand-in for ArduinoCore-API's api/HardwareSerial.h (tests only; see
   api/String.h): the interface every core's Serial implements. */
#pragma once

#include <inttypes.h>
#include "Stream.h"

namespace arduino {

class HardwareSerial : public Stream
{
  public:
    virtual void begin(unsigned long) = 0;
    virtual void begin(unsigned long baudrate, uint16_t config) = 0;
    virtual void end() = 0;
    virtual int available(void) = 0;
    virtual int peek(void) = 0;
    virtual int read(void) = 0;
    virtual void flush(void) = 0;
    virtual size_t write(uint8_t) = 0;
    using Print::write;
    virtual operator bool() = 0;
};

}
