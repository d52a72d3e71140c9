"""Session ends from UTC timestamps (trainers/common/sessions.py): New York dates across DST, half days,
extended hours, and daily bars."""

import numpy as np

from trainers.common.sessions import intraday, new_york_dates, session_last


def utc(*stamps: str) -> np.ndarray:
    return np.array(stamps, dtype="datetime64[ns]")


def test_new_york_dates_in_winter_and_in_summer_including_extended_hours():
    # winter (UTC-5): 04:00 ET pre-market is 09:00 UTC, 19:59 ET after-hours is 00:59 UTC the next day
    assert new_york_dates(utc("2023-01-05T09:00", "2023-01-06T00:59")).tolist() == \
        [np.datetime64("2023-01-05", "D").item()] * 2
    # summer (UTC-4): 04:00 ET is 08:00 UTC, 19:59 ET is 23:59 UTC
    assert new_york_dates(utc("2023-07-05T08:00", "2023-07-05T23:59")).tolist() == \
        [np.datetime64("2023-07-05", "D").item()] * 2


def test_a_session_ends_where_the_next_bar_is_on_another_new_york_date():
    # the July 3rd half day (13:00 ET close = 16:59 UTC), the 5th's full session to 19:59 UTC, then the 6th
    stamps = utc("2023-07-03T16:58", "2023-07-03T16:59", "2023-07-05T13:30", "2023-07-05T19:59",
                 "2023-07-06T13:30", "2023-07-06T13:31")
    assert session_last(stamps).tolist() == [False, True, False, True, False, False]
    assert intraday(stamps)


def test_the_last_bar_of_the_data_is_not_known_to_end_its_session():
    assert session_last(utc("2023-07-05T19:58", "2023-07-05T19:59")).tolist() == [False, False]


def test_daily_bars_are_not_intraday():
    assert not intraday(utc("2023-07-03T00:00", "2023-07-05T00:00", "2023-07-06T00:00"))
