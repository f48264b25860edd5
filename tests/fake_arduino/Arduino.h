/* <Arduino.h> of the tests' Arduino "core" (tests only): ArduinoCore-API
   (the stand-ins in api/) plus, as every core does, a concrete Serial --
   here one that writes to the host's stdout (core_host.cpp), so a sketch
   can run on the host. */
#pragma once

#include "api/ArduinoAPI.h"

#ifdef __cplusplus
class HostSerial : public arduino::HardwareSerial
{
  public:
    void begin(unsigned long) override;
    void begin(unsigned long baudrate, uint16_t config) override;
    void end() override;
    int available(void) override;
    int peek(void) override;
    int read(void) override;
    void flush(void) override;
    size_t write(uint8_t) override;
    using Print::write;
    operator bool() override;
};

extern HostSerial Serial;
#endif
