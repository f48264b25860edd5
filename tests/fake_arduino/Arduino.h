/* Stand-in for the Arduino core's <Arduino.h> (tests only): the few calls
   the cuvil-mcu PlatformIO example makes, with the Arduino API's signatures. */
#ifndef FAKE_ARDUINO_H
#define FAKE_ARDUINO_H

#include <stddef.h>
#include <stdint.h>

class HardwareSerial {
public:
    void begin(unsigned long baud);
    size_t print(const char *s);
    size_t print(char c);
    size_t print(unsigned long n, int base = 10);
    size_t print(double n, int digits = 2);
    size_t println(void);
    size_t println(const char *s);
    explicit operator bool();
};
extern HardwareSerial Serial;

unsigned long micros(void);

#endif
